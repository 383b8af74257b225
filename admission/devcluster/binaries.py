"""Where the upstream programs of the local control plane are found.

``e2e/build.sh`` builds them from the Go module proxy at the versions pinned in
``e2e/versions.env`` and caches each component in ``$BERTH_E2E_CACHE/<component>-<version>/bin``
(default ``~/.cache/berth-e2e``). This module reads the same pins, so the Python side and the
builder cannot disagree about which build to run, and says exactly what to run when a binary is
missing instead of failing later with a confusing error.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
VERSIONS_FILE = REPO_ROOT / "e2e" / "versions.env"

# component -> (version key in versions.env, binaries it provides)
COMPONENTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "kubernetes": (
        "KUBERNETES_VERSION",
        ("kube-apiserver", "kube-scheduler", "kube-controller-manager"),
    ),
    "kubectl": ("KUBERNETES_VERSION", ("kubectl",)),
    "etcd": ("ETCD_VERSION", ("etcd",)),
    "kwok": ("KWOK_VERSION", ("kwok",)),
    "kueue": ("KUEUE_VERSION", ("kueue",)),
    "volcano": ("VOLCANO_VERSION", ("vc-scheduler",)),
    "volcano-controllers": ("VOLCANO_VERSION", ("vc-controller-manager",)),
    "volcano-webhook": ("VOLCANO_VERSION", ("vc-webhook-manager",)),
    "helm": ("HELM_VERSION", ("helm",)),
}


class MissingBinary(RuntimeError):
    """A component was not built; the message names the command that builds it."""


def cache_root() -> Path:
    return Path(os.environ.get("BERTH_E2E_CACHE", Path.home() / ".cache" / "berth-e2e"))


def read_versions(path: Path = VERSIONS_FILE) -> dict[str, str]:
    """KEY=VALUE lines of versions.env (comments and blanks skipped)."""
    out: dict[str, str] = {}
    for lineno, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise ValueError(f"{path}:{lineno}: expected KEY=VALUE, got {raw!r}")
        out[key.strip()] = value.strip()
    return out


@dataclass(frozen=True)
class Component:
    name: str
    version: str
    home: Path  # $cache/<name>-<version>

    @property
    def bin_dir(self) -> Path:
        return self.home / "bin"

    @property
    def share_dir(self) -> Path:
        """Manifests shipped with the component (CRDs, webhook configs)."""
        return self.home / "share"

    @property
    def built(self) -> bool:
        return (self.home / ".complete").is_file()

    def binary(self, name: str) -> Path:
        path = self.bin_dir / name
        if not self.built or not path.is_file():
            raise MissingBinary(
                f"{name} {self.version} is not built (looked in {self.bin_dir}); "
                f"build it with: {REPO_ROOT / 'e2e' / 'build.sh'} {self.name}"
            )
        return path


#: Selects another control plane version than versions.env pins (the kubernetes component only:
#: kubectl stays at the pinned one), as e2e/build.sh does.
VERSION_OVERRIDE = "BERTH_E2E_KUBERNETES_VERSION"


def component(name: str) -> Component:
    key, _ = COMPONENTS[name]
    version = read_versions()[key]
    if name == "kubernetes" and os.environ.get(VERSION_OVERRIDE):
        version = os.environ[VERSION_OVERRIDE]
    return Component(name=name, version=version, home=cache_root() / f"{name}-{version}")


def binary(name: str) -> Path:
    """Path of one upstream binary (``kube-apiserver``, ``etcd``, ``kwok``, ...)."""
    for comp, (_, bins) in COMPONENTS.items():
        if name in bins:
            return component(comp).binary(name)
    raise KeyError(f"unknown binary {name!r}")


def built_binary(name: str, *, log: Path | None = None, timeout: float = 3600) -> Path:
    """Like :func:`binary`, but runs ``e2e/build.sh`` for the component first if it is not
    built (minutes, once: the result is cached). Raises :class:`MissingBinary` with the end of
    the build's output when the build fails (no Go toolchain, no module proxy)."""
    owners = [c for c, (_, bins) in COMPONENTS.items() if name in bins]
    if not owners:
        raise KeyError(f"unknown binary {name!r}")
    comp = owners[0]
    if component(comp).built:
        return component(comp).binary(name)
    script = REPO_ROOT / "e2e" / "build.sh"
    try:
        proc = subprocess.run(["bash", str(script), comp], capture_output=True, text=True,
                              timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise MissingBinary(f"{name} is not built and `{script} {comp}` did not finish: {exc}"
                            ) from None
    if log is not None:
        log.write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-15:])
        raise MissingBinary(f"{name} is not built and `{script} {comp}` failed "
                            f"(exit {proc.returncode}; it needs Go and the module proxy):\n{tail}")
    return component(comp).binary(name)
