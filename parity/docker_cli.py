"""The docker CLI: running containers, with a daemon-less client handled."""

from __future__ import annotations

from dataclasses import dataclass

PS = ["docker", "ps", "--format", "{{.Names}}"]


@dataclass
class DockerState:
    state: str  # "ok" | "no-cli" | "no-daemon" | "error"
    containers: list[str]
    note: str = ""


def parse_ps(rc: int | None, stdout: str, stderr: str) -> DockerState:
    if rc == 0:
        return DockerState("ok", [ln.strip() for ln in stdout.splitlines() if ln.strip()])
    text = (stderr or stdout).strip()
    if "Cannot connect to the Docker daemon" in text or "Is the docker daemon running" in text:
        return DockerState("no-daemon", [], text.splitlines()[0])
    return DockerState("error", [], text.splitlines()[0] if text else f"docker ps exited {rc}")


def running(runner) -> DockerState:
    if not runner.which("docker"):
        return DockerState("no-cli", [], "docker not installed")
    res = runner.run(PS, timeout=30)
    return parse_ps(res.rc, res.stdout, res.stderr)
