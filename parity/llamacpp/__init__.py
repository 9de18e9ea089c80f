"""Engine builds: source (pin), patch series, CMake build, cache, provenance."""
