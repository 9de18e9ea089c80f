"""Typed, versioned run-directory results: one model (model.py), one reader every command reads
run-dir files through (reader.py: one line and exit 2 for a bad file), one writer (writer.py)."""

from parity.results.model import SCHEMA_VERSION, Bench, BenchRow, LeverRow, LeverSummary, Manifest, PairedRow, PointRow, Summary
from parity.results.reader import (BadResultFile, Doc, check, existing_file, load_json, read_bench, read_bisect, read_lever_map, read_manifest, read_matrix, read_paired_tsv,
                                   read_summary, run_dir)  # fmt: skip
from parity.results.writer import plain, write_bench, write_summary

__all__ = ["SCHEMA_VERSION", "Bench", "BenchRow", "LeverRow", "LeverSummary", "Manifest", "PairedRow", "PointRow", "Summary", "BadResultFile", "Doc", "check", "existing_file", "load_json",
           "read_bench", "read_bisect", "read_lever_map", "read_manifest", "read_matrix", "read_paired_tsv", "read_summary", "run_dir", "plain", "write_bench", "write_summary"]
