"""Telemetry: the noise, measured where it arises (issue 23).

Around every serving point a background thread samples the GPU (NVML, else nvidia-smi)
and the host (/proc: load, the client's and the server tree's CPU time); the point's
file telemetry/<engine>-r<k>-n<N>.json keeps the samples and a summary, the row keeps
the short summary, a foreign compute process makes the point invalid and a clock
throttle flags it.  CPU affinity keeps the load generator off the server's cores.

One module per source: nvml_gpu (pynvml), smi_gpu (nvidia-smi, through gpu/nvidia_smi), procfs (/proc);
sampler (the thread, and the power lane beside it for the energy cross-check), point_summary
(summary and verdict), affinity, engine_timing (the engine's own clock beside the client's), watch (the glue run_point calls), energy
(the GPU's energy counter over the point, J per token).  Nothing here is imported by
`parity --help`."""
