"""Kernel traces without nsys: a CUPTI injection library parity builds, its trace as an nsys-shaped export, and the statistics over traced blocks."""

TRACERS = ("auto", "cupti", "nsys")
