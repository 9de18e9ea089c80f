"""Clock throttle ("clocks event") reasons: the bit mask NVML and nvidia-smi report, decoded to names."""

from __future__ import annotations

# NVML's nvmlClocksEventReason* (older pynvml: nvmlClocksThrottleReason*), same bits either way
REASONS: list[tuple[int, str]] = [
    (0x1, "GpuIdle"),
    (0x2, "ApplicationsClocksSetting"),
    (0x4, "SwPowerCap"),
    (0x8, "HwSlowdown"),
    (0x10, "SyncBoost"),
    (0x20, "SwThermalSlowdown"),
    (0x40, "HwThermalSlowdown"),
    (0x80, "HwPowerBrakeSlowdown"),
    (0x100, "DisplayClockSetting"),
]
# not a slowdown of the measured work: the GPU idles between points, or runs at the clocks set for it
BENIGN = frozenset({"GpuIdle", "ApplicationsClocksSetting"})


def table_from(nv) -> list[tuple[int, str]]:
    """The (bit, name) table as the pynvml module spells it (new or old prefix); the built-in one otherwise."""
    out = []
    for bit, name in REASONS:
        for prefix in ("nvmlClocksEventReason", "nvmlClocksThrottleReason"):
            v = getattr(nv, prefix + name, None)
            if isinstance(v, int):
                out.append((v, name))
                break
        else:
            out.append((bit, name))
    return out


def decode(mask: int | None, table: list[tuple[int, str]] = REASONS) -> list[str] | None:
    """Names of the bits set in mask; an unknown bit is named by its hex value."""
    if mask is None:
        return None
    names, known = [], 0
    for bit, name in table:
        known |= bit
        if mask & bit:
            names.append(name)
    rest = mask & ~known
    b = 1
    while rest:
        if rest & b:
            names.append(hex(b))
            rest &= ~b
        b <<= 1
    return names


def parse_mask(text: str) -> int | None:
    """'0x0000000000000004' -> 4; '[N/A]' / 'Not Supported' -> None."""
    try:
        return int(text.strip(), 16)
    except ValueError:
        return None


def slowdowns(names) -> list[str]:
    """The reasons that mean the work was slowed (everything but GpuIdle / ApplicationsClocksSetting)."""
    return [n for n in names or [] if n not in BENIGN]
