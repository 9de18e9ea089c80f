"""The docker CLI: running containers, with a daemon-less client handled (not a crash)."""

from __future__ import annotations

from dataclasses import dataclass, field

PS = ["docker", "ps", "--format", "{{.Names}}\t{{.Image}}"]


@dataclass
class DockerState:
    state: str  # "ok" | "no-cli" | "no-daemon" | "no-access" | "error"
    containers: list[str] = field(default_factory=list)  # "name" (image in images)
    note: str = ""
    images: dict[str, str] = field(default_factory=dict)  # name -> image


def parse_ps(rc: int | None, stdout: str, stderr: str) -> DockerState:
    """`docker ps --format '{{.Names}}\\t{{.Image}}'`: one line per running container."""
    if rc == 0:
        names, images = [], {}
        for ln in stdout.splitlines():
            if not ln.strip():
                continue
            name, _, image = ln.strip().partition("\t")
            names.append(name)
            images[name] = image
        return DockerState("ok", names, f"{len(names)} running container(s)", images)
    text = (stderr or stdout).strip()
    first = text.splitlines()[0] if text else f"docker ps exited {rc}"
    if "Cannot connect to the Docker daemon" in text or "Is the docker daemon running" in text:
        return DockerState("no-daemon", note=f"no daemon ({first})")
    if "permission denied" in text.lower():
        return DockerState("no-access", note=f"no access to the daemon ({first})")
    return DockerState("error", note=first)


def matching(state: DockerState, name_filter: str | None) -> list[str]:
    """Running containers that make the GPU busy: any (filter None) or those whose name or image contains the filter."""
    if name_filter is None:
        return list(state.containers)
    return [c for c in state.containers if name_filter in c or name_filter in state.images.get(c, "")]


def running(runner) -> DockerState:
    if not runner.which("docker"):
        return DockerState("no-cli", note="docker not installed")
    res = runner.run(PS, timeout=30)
    if res.timed_out:
        return DockerState("error", note="docker ps timed out after 30 s")
    return parse_ps(res.rc, res.stdout, res.stderr)
