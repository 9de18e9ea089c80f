"""Model files: synthesized tiny GGUFs (synth), tiny HF checkpoints (hf_tiny), their specs (spec)
and the profile's model list (catalog).  Kept empty: config imports parity.models.spec, and a
package that imported synth here would load the engines into every command."""
