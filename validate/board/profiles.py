"""Board profiles and the board-compatibility gate.

A profile (``validate/board_profiles/NAME.toml``) names the runtime (``tflite`` or ``tflm``), its version,
the dtypes it runs, RAM for the tensor arena, flash for the model, and optional per-op
overrides with a reason. Which builtin op versions a ``tflite`` board runs comes, best first,
from:

- ``op_table``: the op versions its real runtime was probed to have (``edgeport boards
  probe``; ``validate/board_profiles/NAME.ops.toml``, with the probe's provenance);
- otherwise TFLite's op-version -> minimum-runtime table (``validate/board_profiles/op_min_runtime.toml``),
  which records when versions were tabulated, not when ops appeared: a fallback for
  profiles whose runtime nobody has probed.

A ``tflm`` board lists the kernels it has. ``[install]`` says how ``edgeport boards
install`` makes the board's real runtime on this machine, ``[runner]`` how to reach a real
board over SSH (``validate/board/runtime.py``). ``check_model`` is the gate.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from edgeport.errors import BadInputError
from edgeport.ops.tflite_model import OpUse, TFLiteSummary, read_tflite
from edgeport.userfiles import Refused, read_bounded
from edgeport.validate.board import uint8_probe
from edgeport.validate.board.verdict import BoardCheck, BoardOp

BOARDS_DIR = Path(__file__).parents[1] / "board_profiles"  # validate/board_profiles/: the profiles and op tables (data)
RUNTIMES = ("tflite", "tflm")
KERNELS = ("reference", "optimized")  # a tflite board's kernels (``BoardProfile.kernels``)
# index and shape tensors: every runtime has them whatever arithmetic it runs
INDEX_DTYPES = {"int32", "int64", "bool"}
# What a kernel older than the version an op needs does with it (``OpUse.needs``: the version
# its options, types and ranks need, ops/tflite_versions.py). A converter may declare less (onnx2tf
# 2.x: RESIZE_BILINEAR with half_pixel_centers -- the write-up's bug -- and a grouped CONV_2D, both
# as v1), so what the op computes decides, not the version declared.
OLDER_KERNEL = {
    "half_pixel_centers": "would load the op and ignore it (computing something else)",
    "align_corners": "would load the op and ignore it (computing something else)",
    "grouped": "refuses it when the interpreter prepares it (input and filter channels differ)",
}


def parse_version(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(p) for p in str(text).split("."))
    except ValueError as exc:
        raise BadInputError(f"version {text!r} is not dotted numbers like 1.13.1") from exc


def version_le(a: str, b: str) -> bool:
    """``a <= b`` component by component (1.13.1 < 1.14.0; 2.2 == 2.2.0)."""
    va, vb = parse_version(a), parse_version(b)
    n = max(len(va), len(vb))
    return va + (0,) * (n - len(va)) <= vb + (0,) * (n - len(vb))


@dataclass(frozen=True)
class OpOverride:
    max_version: int
    reason: str


@dataclass(frozen=True)
class OpTable:
    """The op versions a runtime has, as probed from the runtime itself."""

    versions: dict[str, frozenset[int]]
    source: str  # provenance in a few words: "probed on TensorFlow Lite 1.13.1 (tensorflow==1.13.1), 2026-11-30"
    uint8: "QuantisedKernels | None" = None  # its [uint8] table: the ops it computes on uint8


@dataclass(frozen=True)
class QuantisedKernels:
    """The ops a board runs on a quantised type: its ``[uint8]`` table (why: ``uint8_probe``)."""

    ops: frozenset[str]
    source: str  # how it is known, in a few words


@dataclass(frozen=True)
class InstallSpec:
    """How ``edgeport boards install`` builds the board's runtime: a venv of this Python version."""

    python: str  # "3.7"
    packages: tuple[str, ...]


@dataclass(frozen=True)
class RunnerSpec:
    """A real board reached over SSH (``ssh://user@host[:port]``), with a Python and TFLite on it;
    every field checked by ``runner_spec`` (why: "what a profile may contain", below)."""

    url: str
    python: str = "python3"  # one of REMOTE_PYTHONS, or an absolute path of plain characters
    identity: str | None = None  # private key file; default: ssh's own (agent, ~/.ssh/config)
    known_hosts: str | None = None  # the known-hosts file to check the board's key against; default: ssh's own
    connect_timeout_s: int = 10
    timeout_s: float = 300.0  # for one run, transfers included
    workdir: str = "/tmp"  # where run folders are made (and removed) on the board
    max_reply_mb: float = 256.0  # the most the board may send back (outputs and messages) before the run is stopped
    ssh_port: int | None = None  # the profile's ``port``, where its url names none

    @property
    def user(self) -> str | None:
        return parse_ssh_url(self.url)[0]

    @property
    def host(self) -> str:
        return parse_ssh_url(self.url)[1]

    @property
    def port(self) -> int:
        if self.ssh_port is not None and not _url_names_port(self.url):
            return self.ssh_port
        return parse_ssh_url(self.url)[2]


_SSH_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,63}")
_SSH_HOST = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?")


def parse_ssh_url(url: str) -> tuple[str | None, str, int]:
    """``ssh://[user@]host[:port]`` -> (user, host, port), parsed strictly: the user and host are
    names (letters, digits, ``._-``; never a leading ``-``, which ``ssh`` would read as an option),
    or an IPv6 address in brackets; the port is 1-65535."""
    from urllib.parse import urlsplit

    bad = BadInputError(f"runner {url!r} is not ssh://[user@]host[:port] (user and host: letters, digits, '.', '_', '-', "
                        f"not starting with '-'; port 1-65535); e.g. --runner ssh://pi@192.168.1.20")
    if not isinstance(url, str) or not url.isprintable() or any(c.isspace() for c in url):
        raise bad
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise bad from exc
    if parts.scheme != "ssh" or parts.path not in ("", "/") or parts.query or parts.fragment or parts.password is not None:
        raise bad
    host, user = parts.hostname or "", parts.username
    if user is not None and not _SSH_USER.fullmatch(user):
        raise bad
    if ":" in host:  # an IPv6 literal, from [brackets]
        import ipaddress

        try:
            ipaddress.IPv6Address(host)
        except ValueError as exc:
            raise bad from exc
    elif not _SSH_HOST.fullmatch(host):
        raise bad
    if port is not None and not 1 <= port <= 65535:
        raise bad
    return user, host, port or 22


def _url_names_port(url: str) -> bool:
    from urllib.parse import urlsplit

    return urlsplit(url).port is not None


# -- what a profile may contain ----------------------------------------------------------------
# A profile is a file people pass around (a vendor's, a colleague's, one from an issue thread):
# data, never a command. Each key is from a fixed list and each value checked; nothing reaches a
# shell or ssh as free text, and a name never becomes a path outside its root.

# a board's name: it names the folder of its installed runtime (runtimes/NAME), so a plain
# identifier, never a path ("/abs/rt", "../x") and never "." or ".."
_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,62}[A-Za-z0-9])?")
# an absolute path of plain characters: no space, quote, "$", ";", "%" (ssh's tokens) or newline,
# so it is one word to ssh and to a shell, and never read as an option (it starts with "/")
PLAIN_PATH = re.compile(r"/[A-Za-z0-9._+/@-]{0,1023}")
# the interpreters a profile may name on the board without a path
REMOTE_PYTHONS = ("python3", "python", *(f"python3.{minor}" for minor in range(5, 16)))
DTYPES = ("float32", "float16", "int8", "uint8", "int16", "int32", "int64", "bool")
_OP_NAME = re.compile(r"[A-Z][A-Z0-9_]{0,63}")
_VERSION = re.compile(r"[0-9]{1,6}(?:\.[0-9]{1,6}){0,3}")
PROFILE_KEYS = ("name", "description", "runtime", "version", "dtypes", "ram_bytes", "flash_bytes", "ops", "overrides",
                "differences", "op_table", "install", "runner", "kernels")
INSTALL_KEYS = ("python", "packages")
RUNNER_KEYS = ("url", "port", "identity", "known_hosts", "connect_timeout_s", "python", "timeout_s", "workdir", "max_reply_mb")
MAX_DESCRIPTION = 300


class ProfileError(BadInputError):
    """A value of a profile that is not one it may hold (exit 2; ``load_board`` adds the file's name)."""


def is_plain_name(name: object) -> bool:
    """A board name edgeport may use as one folder name: letters, digits, ``._-``, no ``..``."""
    return isinstance(name, str) and bool(_NAME.fullmatch(name)) and ".." not in name


def check_name(name: object, what: str = "name") -> str:
    if not is_plain_name(name):
        raise ProfileError(f"{what} {name!r} is not a plain name (letters, digits, '.', '_', '-'; 1-64 characters, "
                           f"starting and ending with a letter or digit; no '..'): it names the board's runtime folder")
    return name


def _keys(table: object, allowed: tuple[str, ...] | None, where: str) -> dict:
    """``table``, a table holding only the keys ``allowed`` (None: any key)."""
    if not isinstance(table, dict):
        raise ProfileError(f"{where} is not a table")
    unknown = sorted(k for k in table if k not in allowed) if allowed is not None else []
    if unknown:
        why = (" (free ssh options, e.g. ProxyCommand, run commands here: only these keys reach ssh)"
               if where == "[runner]" and "options" in unknown else "")
        raise ProfileError(f"{where} has unknown keys {unknown}{why}; valid: {', '.join(allowed)}")
    return table


def _local_file(value: object, key: str) -> str:
    """A file on this machine ssh reads (a key, a known-hosts file): an absolute path of plain characters, or ``~/...``."""
    if isinstance(value, str) and value.startswith("~/"):
        value = str(Path(value).expanduser())
    if not (isinstance(value, str) and PLAIN_PATH.fullmatch(value)):
        raise ProfileError(f"[runner] {key} {value!r} is not an absolute path (or ~/...) of plain characters "
                           f"(letters, digits, '._+/@-')")
    return value


def _number(value: object, key: str, lo: float, hi: float, *, whole: bool = False):
    ok = isinstance(value, int) if whole else isinstance(value, (int, float))
    if not ok or isinstance(value, bool) or not lo <= value <= hi:
        kind = "a whole number" if whole else "a number"
        raise ProfileError(f"{key} {value!r} is not {kind} in [{lo:g}, {hi:g}]")
    return value


def remote_python(value: object) -> str:
    """The board's interpreter: one of ``REMOTE_PYTHONS``, or an absolute path of plain characters."""
    if not (isinstance(value, str) and (value in REMOTE_PYTHONS or PLAIN_PATH.fullmatch(value))):
        raise ProfileError(f"[runner] python {value!r} is not one of {', '.join(REMOTE_PYTHONS[:3])}, ... or an absolute path "
                           f"of plain characters (letters, digits, '._+/@-'), e.g. /home/pi/venv/bin/python")
    return value


def runner_spec(table: object) -> RunnerSpec:
    """A profile's ``[runner]``, every key checked."""
    r = _keys(table, RUNNER_KEYS, "[runner]")
    if "url" not in r or not isinstance(r["url"], str):
        raise ProfileError("[runner] needs url = \"ssh://user@host[:port]\"")
    parse_ssh_url(r["url"])
    port = _number(r["port"], "[runner] port", 1, 65535, whole=True) if "port" in r else None
    if port is not None and _url_names_port(r["url"]) and parse_ssh_url(r["url"])[2] != port:
        raise ProfileError(f"[runner] port {port} and the port of url {r['url']!r} differ; give it once")
    workdir = r.get("workdir", "/tmp")
    if not (isinstance(workdir, str) and PLAIN_PATH.fullmatch(workdir)):
        raise ProfileError(f"[runner] workdir {workdir!r} is not an absolute path of plain characters on the board")
    return RunnerSpec(
        url=r["url"], python=remote_python(r.get("python", "python3")),
        identity=_local_file(r["identity"], "identity") if "identity" in r else None,
        known_hosts=_local_file(r["known_hosts"], "known_hosts") if "known_hosts" in r else None,
        connect_timeout_s=int(_number(r.get("connect_timeout_s", 10), "[runner] connect_timeout_s", 1, 600, whole=True)),
        timeout_s=float(_number(r.get("timeout_s", 300.0), "[runner] timeout_s", 0.001, 86400)),
        workdir=workdir, max_reply_mb=float(_number(r.get("max_reply_mb", 256.0), "[runner] max_reply_mb", 0.001, 65536)),
        ssh_port=port,
    )


@dataclass(frozen=True)
class BoardProfile:
    name: str
    description: str
    runtime: str
    version: str
    dtypes: tuple[str, ...]
    ram_bytes: int
    flash_bytes: int
    ops: tuple[str, ...] | None = None  # tflm: kernels available
    overrides: dict[str, OpOverride] = field(default_factory=dict)
    differences: tuple[str, ...] = ()  # named ways it computes differently (validate/board/differences.py)
    op_table: OpTable | None = None  # probed from the real runtime; beats op_min_runtime.toml
    install: InstallSpec | None = None
    runner: RunnerSpec | None = None
    shipped: bool = False  # one of edgeport's own profiles (validate/board_profiles/), not a file the user passed
    # a ``tflite`` board's kernels, which its emulator runs: "reference" (BUILTIN_REF: an unknown or an
    # old runtime, the plainest arithmetic, its differences applied) or "optimized" (a current TFLite's
    # own: XNNPACK and the optimised builtins, what this process's LiteRT runs for the ``tflite`` rows)
    kernels: str = "reference"

    @property
    def uint8(self) -> QuantisedKernels | None:
        """The ops it computes on uint8, where it runs uint8 and they were probed."""
        return self.op_table.uint8 if self.op_table is not None and "uint8" in self.dtypes else None

    @property
    def quantised(self) -> str | None:
        """The quantised type it runs: ``int8`` (today's runtimes, TFLite Micro), ``uint8`` (TFLite
        1.x's fast path), or None."""
        return next((t for t in ("int8", "uint8") if t in self.dtypes), None)

    def lacks(self, name: str, version: int, needs: int | None = None, dtype: str = "", notes: tuple[str, ...] = ()) -> bool:
        """Whether it cannot run builtin ``name`` declared at ``version``, computing what ``needs``
        (``ops/tflite_versions.py``) on ``dtype`` input, as ``notes`` (``ops/tflite_model.op_notes``)
        say: the lowering's question (``ops/lowering/registry.py``)."""
        use = OpUse(name, version, 1, tuple(notes), needs if needs is not None and needs > version else None, dtype)
        return bool(op_reasons(use, self))

    @property
    def has_real_runtime(self) -> bool:
        """Whether the board's runtime lives outside this process (its emulator row is then
        labelled "emulated", and the real one adds its own row where it can be reached)."""
        return self.install is not None or self.runner is not None

    def runs_dtype(self, dtype: str) -> bool:
        return dtype in self.dtypes

    def max_op_version(self, op: str) -> int:
        """The highest version of ``op`` this board runs (0: none)."""
        if self.runtime == "tflm":
            return 10**6 if self.ops and op in self.ops else 0
        if self.op_table is not None:
            return max(self.op_table.versions.get(op, ()), default=0)
        best = 0
        for version, needs in op_min_runtime().get(op, {}).items():
            if version_le(needs, self.version):
                best = max(best, version)
        if op in self.overrides:
            best = min(best, self.overrides[op].max_version)
        return best


@lru_cache(maxsize=1)
def op_min_runtime() -> dict[str, dict[int, str]]:
    raw = tomllib.loads((BOARDS_DIR / "op_min_runtime.toml").read_text())
    return {op: {int(v): str(rt) for v, rt in versions.items()} for op, versions in raw.items()}


def min_runtime_of(ops) -> str | None:
    """The oldest TFLite runtime that has every ``(name, version)`` in ``ops``, by TFLite's own
    table (``op_min_runtime.toml``); ``None`` when one of them is not in it."""
    table, oldest = op_min_runtime(), "0"
    for name, version in ops:
        needs = table.get(name, {}).get(version)
        if needs is None:
            return None
        if not version_le(needs, oldest):
            oldest = needs
    return oldest


def board_names() -> list[str]:
    return sorted(p.stem for p in BOARDS_DIR.glob("*.toml") if p.stem != "op_min_runtime" and not p.stem.endswith(".ops"))


def load_op_table(path: Path) -> OpTable:
    """``NAME.ops.toml`` (written by ``edgeport boards probe``) -> the op versions and their provenance."""
    raw = tomllib.loads(_toml_text(Path(path), f"op_table {Path(path).name!r}"))
    prov = raw["provenance"]
    source = f"probed on {prov['runtime']} {prov['version']} ({prov['package']}), {prov['date']}"
    uint8 = None
    if "uint8" in raw:
        uint8 = QuantisedKernels(frozenset(str(o) for o in raw["uint8"]["ops"]),
                                 f"{len(raw['uint8']['ops'])} of {raw['uint8']['probed']} uint8 one-op models agree; {source}")
    return OpTable({op: frozenset(int(v) for v in vs) for op, vs in raw["ops"].items()}, source, uint8)


def load_board(name_or_path: str) -> BoardProfile:
    """A shipped profile by name, or a profile ``.toml`` by path; every key checked (``PROFILE_KEYS``)."""
    path = Path(name_or_path)
    if not (path.suffix == ".toml" and path.is_file()):
        if not is_plain_name(name_or_path):  # a shipped profile's name is a plain name, never a path
            raise BadInputError(f"unknown board {name_or_path!r}; valid: {', '.join(board_names())} (or a path to a profile .toml)")
        path = BOARDS_DIR / f"{name_or_path}.toml"
    if not path.is_file() or path.stem == "op_min_runtime" or path.stem.endswith(".ops"):
        raise BadInputError(f"unknown board {name_or_path!r}; valid: {', '.join(board_names())} (or a path to a profile .toml)")
    try:
        raw = _keys(tomllib.loads(_toml_text(path, "it")), PROFILE_KEYS, "the profile")
        runtime = raw["runtime"]
        if runtime not in RUNTIMES:
            raise ValueError(f"runtime {runtime!r} is not one of {', '.join(RUNTIMES)}")
        if not (isinstance(raw["version"], str) and _VERSION.fullmatch(raw["version"])):
            raise ProfileError(f"version {raw['version']!r} is not dotted numbers like \"1.13.1\"")
        name = check_name(raw.get("name", path.stem), "name" if "name" in raw else "the file's name (no name = ...)")
        description = raw.get("description", "")
        if not isinstance(description, str) or len(description) > MAX_DESCRIPTION:
            raise ProfileError(f"description is not a text of at most {MAX_DESCRIPTION} characters")
        dtypes = raw["dtypes"]
        if not (isinstance(dtypes, list) and dtypes and all(d in DTYPES for d in dtypes)):
            raise ProfileError(f"dtypes {dtypes!r} is not a list of {', '.join(DTYPES)}")
        ops = raw.get("ops")
        if ops is not None and not (isinstance(ops, list) and all(isinstance(o, str) and _OP_NAME.fullmatch(o) for o in ops)):
            raise ProfileError("ops is not a list of builtin op names (CONV_2D, ...)")
        overrides = {}
        for op, o in _keys(raw.get("overrides", {}), None, "overrides").items():
            if not _OP_NAME.fullmatch(op):
                raise ProfileError(f"overrides: {op!r} is not a builtin op name (CONV_2D, ...)")
            o = _keys(o, ("max_version", "reason"), f"overrides.{op}")
            if not isinstance(o.get("reason"), str) or len(o["reason"]) > MAX_DESCRIPTION:
                raise ProfileError(f"overrides.{op}.reason is not a text of at most {MAX_DESCRIPTION} characters")
            overrides[op] = OpOverride(int(_number(o.get("max_version"), f"overrides.{op}.max_version", 0, 1000, whole=True)),
                                       o["reason"])
        op_table = load_op_table(_op_table_path(raw["op_table"], path.parent)) if "op_table" in raw else None
        install = None
        if "install" in raw:
            i = _keys(raw["install"], INSTALL_KEYS, "[install]")
            if not (isinstance(i.get("python"), str) and _VERSION.fullmatch(i["python"])
                    and isinstance(i.get("packages"), list) and all(isinstance(p, str) for p in i["packages"])):
                raise ProfileError("[install] needs python = \"3.7\" and packages = [\"name==version\", ...]")
            install = InstallSpec(i["python"], tuple(i["packages"]))
        runner = runner_spec(raw["runner"]) if "runner" in raw else None
        from edgeport.validate.board.differences import DIFFERENCES

        differences = raw.get("differences", [])
        if not isinstance(differences, list):
            raise ProfileError("differences is not a list")
        unknown = [d for d in differences if d not in DIFFERENCES]
        if unknown:
            raise ValueError(f"unknown differences {unknown}; valid: {', '.join(DIFFERENCES)}")
        kernels = raw.get("kernels", "reference")
        if kernels not in KERNELS or (kernels != "reference" and runtime != "tflite"):
            raise ProfileError(f"kernels {kernels!r} is not one of {', '.join(KERNELS)} (and \"optimized\" only for runtime = \"tflite\")")
        return BoardProfile(
            name=name, description=description, runtime=runtime,
            version=raw["version"], dtypes=tuple(dtypes), ram_bytes=int(_number(raw["ram_bytes"], "ram_bytes", 0, 2**50, whole=True)),
            flash_bytes=int(_number(raw["flash_bytes"], "flash_bytes", 0, 2**50, whole=True)),
            ops=tuple(ops) if ops is not None else None, overrides=overrides,
            differences=tuple(differences), op_table=op_table, install=install, runner=runner,
            shipped=path.resolve().parent == BOARDS_DIR.resolve(), kernels=kernels,
        )
    except BadInputError as exc:  # a value it may not hold, in its own words
        raise BadInputError(f"board profile {str(path)!r} is invalid: {exc}; see docs/boards.md") from exc
    except (KeyError, ValueError, TypeError, OSError, UnicodeDecodeError, RecursionError, tomllib.TOMLDecodeError) as exc:
        what = f"missing key {exc}" if isinstance(exc, KeyError) else f"{type(exc).__name__}: {exc}"
        raise BadInputError(f"board profile {str(path)!r} is invalid ({what}); see validate/board_profiles/*.toml and docs/boards.md") from exc


MAX_PROFILE_BYTES = 1 << 20  # a profile is a few lines, an op table a few hundred
_OP_TABLE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\.ops\.toml")


def _toml_text(path: Path, what: str) -> str:
    """A profile's or an op table's text: a plain file of at most ``MAX_PROFILE_BYTES``, UTF-8."""
    try:
        return read_bounded(path, MAX_PROFILE_BYTES).decode("utf-8")
    except Refused as exc:
        raise ProfileError(f"{what} {exc}") from None


def _op_table_path(name: object, folder: Path) -> Path:
    """A profile's ``op_table``: a file name (``NAME.ops.toml``, never a path), beside the profile,
    else one of the shipped tables (read as a profile is: ``_toml_text``)."""
    if not (isinstance(name, str) and _OP_TABLE.fullmatch(name) and ".." not in name):
        raise ProfileError(f"op_table {name!r} is not a file name NAME.ops.toml (beside the profile, or a shipped one: "
                           f"{', '.join(p.name for p in sorted(BOARDS_DIR.glob('*.ops.toml')))})")
    for candidate in (folder / name, BOARDS_DIR / name):
        if candidate.is_file():
            return candidate
    raise ProfileError(f"op_table {name!r} is neither beside the profile nor one of the shipped tables")


def _op_label(op) -> str:
    notes = f" ({', '.join(op.notes)})" if op.notes else ""
    return f"{op.name} v{op.version}{notes}"


# what a uint8 note means, for the reason a board's kernel fails it (validate/board/uint8_probe.py)
UINT8_NOTES = {"fine_input": "an input scale under 2^-12", "large_window": "a window of more than 256 values"}


def op_reasons(op, board: "BoardProfile") -> list[str]:
    """Every reason ``board`` cannot run the builtin ``op`` (an ``OpUse``); empty when it can."""
    reasons: list[str] = []
    runs = f"{board.name} runs {board.version}" if board.runtime == "tflite" else f"{board.name} is TFLite Micro"
    override = board.overrides.get(op.name)
    if override and op.version > override.max_version:
        return [f"{_op_label(op)}: {override.reason}"]
    if board.runtime == "tflm":
        return [] if board.ops and op.name in board.ops else [f"{op.name} has no TFLite Micro kernel on {board.name}"]
    if op.needs is not None and op.needs > op.version and board.max_op_version(op.name) < op.needs:
        # (a declared version that is enough is judged by the version rule below)
        what = ", ".join(op.notes) or f"what its v{op.needs} signature means"
        older = next((OLDER_KERNEL[n] for n in op.notes if n in OLDER_KERNEL), "computes only what its own version does")
        reasons.append(f"{_op_label(op)}: only {op.name} v{op.needs} kernels honour {what}; {runs}, whose kernel {older}")
    if board.op_table is not None:
        have = sorted(board.op_table.versions.get(op.name, ()))
        if op.version not in have:
            has = f"it has {op.name} v{', v'.join(map(str, have))}" if have else f"it has no {op.name} kernel at all"
            reasons.append(f"{_op_label(op)} is not in {board.name}'s runtime: {has} ({board.op_table.source})")
    else:
        needs = op_min_runtime().get(op.name, {}).get(op.version)
        if needs is None:
            reasons.append(f"{_op_label(op)} is not in TFLite's op-version table; cannot prove {board.name} runs it")
        elif not version_le(needs, board.version):
            reasons.append(f"{_op_label(op)} needs runtime {needs}; {runs}")
    if op.dtype == "uint8" and board.uint8 is not None:
        if op.name not in board.uint8.ops:
            why = "has no uint8 kernel for it, or computes it wrongly" if op.name in uint8_probe.PROBES else \
                "was not probed for it on uint8 (validate/board/uint8_probe.py), so edgeport cannot say it runs it"
            reasons.append(f"{_op_label(op)} on uint8: {board.name} {why} ({board.uint8.source})")
        for note in op.notes:
            probe = uint8_probe.variant(op.name, note)
            if probe in uint8_probe.PROBES and probe not in board.uint8.ops:
                reasons.append(f"{_op_label(op)} on uint8: {board.name}'s kernel computes it wrongly for {UINT8_NOTES[note]} "
                               f"({board.uint8.source})")
    return reasons


def check_model(summary: TFLiteSummary, board: BoardProfile) -> list[str]:
    """Every reason ``board`` cannot run the model; empty when it can."""
    # a file that cannot run anywhere cannot run here: what a runtime refuses, or computes from nothing
    reasons: list[str] = [f"the file is structurally invalid: {p}" for p in summary.problems]
    runs = f"{board.name} runs {board.version}" if board.runtime == "tflite" else f"{board.name} is TFLite Micro"
    for custom in summary.custom_ops:
        reasons.append(f"{custom} is a custom op; {board.name} has only builtin kernels")
    for op in summary.ops:  # uses of one op that differ only in what the board does not judge say one thing
        if not op.name.startswith("CUSTOM:"):
            reasons += [r for r in op_reasons(op, board) if r not in reasons]
    # a runtime never reads min_runtime_version: once its own op versions are known, they decide
    if board.runtime == "tflite" and board.op_table is None and summary.min_runtime_version and not version_le(summary.min_runtime_version, board.version):
        reasons.append(f"the model's min_runtime_version metadata is {summary.min_runtime_version}; {runs}")
    for dtype in summary.activation_dtypes:
        if dtype not in INDEX_DTYPES and not board.runs_dtype(dtype):
            reasons.append(f"{dtype} tensors; {board.name} runs {', '.join(board.dtypes)}")
    if summary.size_bytes > board.flash_bytes:
        reasons.append(f"model is {summary.size_bytes:,} bytes; {board.name} has {board.flash_bytes:,} bytes of flash")
    return reasons


def board_verdict(path: Path, board: BoardProfile) -> BoardCheck:
    """The board gate's verdict on one file, computed once and passed on (the report's
    ``board.checks``, the emulator's row, ``edgeport boards check``)."""
    from dataclasses import asdict

    summary = read_tflite(path)
    reasons = check_model(summary, board)
    return BoardCheck(runnable=not reasons, reasons=tuple(reasons), min_runtime_version=summary.min_runtime_version,
                      size_bytes=summary.size_bytes, ops=tuple(BoardOp(**asdict(o)) for o in summary.ops),
                      activation_dtypes=tuple(summary.activation_dtypes))
