"""Error types and the exit codes they map to (documented in README: Exit codes)."""

EXIT_OK = 0
EXIT_FAILED = 1  # a step failed for a reason not covered below
EXIT_USAGE = 2  # bad input: config, arguments, unreachable host, missing file
EXIT_GATE = 3  # a correctness gate is red
EXIT_INFRA = 4  # infrastructure: build failed, server never ready, lock timeout
EXIT_REGRESSION = 5  # performance regression beyond the noise rule
EXIT_INVALID = 6  # a measurement broke a validity rule (its numbers are written, marked invalid)
EXIT_CHANGE_POINT = 7  # a change point over the run history is newly confirmed (parity.history)
EXIT_NOT_ENGAGED = 8  # a lever A/B's lever did not engage: no evidence it was on in arm B (parity.levers.engagement)
EXIT_INTERRUPTED = 130


class ParityError(Exception):
    """Base error: printed as one line, never as a traceback."""

    exit_code = EXIT_FAILED


class UsageError(ParityError):
    """Bad input from the user: config, flags, paths, hosts."""

    exit_code = EXIT_USAGE


class ConfigError(UsageError):
    def __init__(self, source: str, key: str, problem: str):
        self.source, self.key, self.problem = source, key, problem
        where = f"{source}: {key}" if key else source
        super().__init__(f"{where}: {problem}")


class GateFailed(ParityError):
    exit_code = EXIT_GATE


class InfraError(ParityError):
    exit_code = EXIT_INFRA


class RegressionDetected(ParityError):
    exit_code = EXIT_REGRESSION


class InvalidMeasurement(ParityError):
    exit_code = EXIT_INVALID


class ChangePointConfirmed(ParityError):
    """The history of this run's series has a step that is significant and has enough runs after it."""

    exit_code = EXIT_CHANGE_POINT


class NotEngaged(ParityError):
    """A lever whose arm B shows no evidence of it (its env string in no file of the build, the
    build unchanged, an asked trace marker absent): NOT ENGAGED, never FLAT or GO."""

    exit_code = EXIT_NOT_ENGAGED


class Interrupted(ParityError):
    exit_code = EXIT_INTERRUPTED


class OutputClosed(KeyboardInterrupt):
    """stdout/stderr went away (the terminal closed, or the SSH channel of a delegated run
    dropped): handled like an interrupt -- children stopped, lock released, run interrupted."""
