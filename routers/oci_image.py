"""Router container images as OCI image layouts, with Debian's own tools (``python -m routers oci``).

The container counterpart of :mod:`routers.disk_image`: a recipe (``routers/recipes/<name>/``,
the same ``recipe.toml`` format with an ``[oci]`` table instead of ``[disk]``) becomes an OCI
image layout, the form a profile's ``[image] oci = "<layout>:<tag>"`` names for HV=criu.  Output
in ``<cache>/images/<recipe>/``::

    oci/            the OCI image layout (oci-layout, index.json, blobs/sha256/...), one tag
    manifest.json   recipe, cache key, package and tool versions, the image digest and sizes

How, and why so:

* ``mmdebstrap`` (root mode, a directory) installs the recipe's packages into a tree, exactly as
  for a disk image but with no kernel and no init system; ``rootfs/`` is synced in by mmdebstrap's
  ``sync-in`` essential hook (argv lists only, :func:`mmdebstrap_argv`).  The device nodes that
  root mode creates under ``/dev`` are removed (a container runtime mounts its own ``/dev``), and
  the build host's ``/etc/hostname`` and ``/etc/resolv.conf``, which mmdebstrap copied in for
  apt, are emptied.
* ``umoci`` (Debian's package; written by the runc maintainers for exactly this) makes the
  layout: ``umoci init``, ``umoci new`` (an empty tagged image), ``umoci insert <tree> /`` (the
  whole tree as one gzip layer, ownership and modes kept), ``umoci config`` (entry point, command,
  environment, working directory, stop signal from the recipe) and ``umoci gc`` (drops the blobs
  the edits left unreferenced).  No daemon, no registry, no ``docker build``.
* :func:`unpack` gives the root file system of a tagged image with ``umoci raw unpack`` (layers
  applied in order, whiteouts honoured; ``--rootless`` when not root).  :func:`unpack_archive`
  converts a ``docker save`` archive first with ``skopeo copy docker-archive:X oci:Y`` (Debian's
  skopeo), then unpacks that.

Cached: nothing is done when ``manifest.json`` records the recipe's key (:func:`recipe_key`) and
the layout still holds the tag with the recorded digest, every blob of it matching its SHA-256.
Building needs root (mmdebstrap's root mode, file ownership in the layer).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import logging
import os
import re
import shutil
import stat
import subprocess
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from migrate.core import privapt
from routers import disk_image, disk_recipe
from routers.disk_recipe import _NAME_RE, RECIPE_FILE, RECIPE_FORMAT, VARIANTS, _field, _strings, resolve
from routers.errors import BuildError, DependencyError, ProfileFileError, RecipeError

log = logging.getLogger(__name__)

LAYOUT_DIR = "oci"
MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = 1
OVERLAY_DIR = "rootfs"
#: bumped when the builder makes a different image from the same recipe (part of the cache key)
BUILDER_FORMAT = 1
REF_ANNOTATION = "org.opencontainers.image.ref.name"
MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
#: Debian packages the OCI builder runs on the host (Makefile APT_PACKAGES)
HOST_PACKAGES = ("mmdebstrap", "umoci", "skopeo")
BUILD_TOOLS = ("mmdebstrap", "umoci")
MMDEBSTRAP_TIMEOUT_S = 1800.0
TOOL_TIMEOUT_S = 600.0
#: the OCI distribution spec's tag grammar
_TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$")
_ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_SIGNAL_RE = re.compile(r"^SIG[A-Z0-9+-]+$")
#: files mmdebstrap copies from the build host, emptied in the image
HOST_FILES = ("etc/hostname", "etc/resolv.conf")
OCI_KEYS = ("tag", "entrypoint", "cmd", "env", "workdir", "stop_signal")
#: skopeo's signature policy for a local archive (it carries no signatures to check)
ACCEPT_ANYTHING_POLICY = {"default": [{"type": "insecureAcceptAnything"}]}


@dataclass(frozen=True)
class OciRecipe:
    """A parsed container recipe (``recipe.toml`` with ``[debian]`` and ``[oci]``)."""

    name: str
    directory: Path
    description: str
    suite: str
    variant: str
    architecture: str
    packages: tuple[str, ...]
    path_exclude: tuple[str, ...]
    path_include: tuple[str, ...]
    report_versions: tuple[str, ...]
    tag: str
    entrypoint: tuple[str, ...]
    cmd: tuple[str, ...]
    env: tuple[str, ...]
    workdir: str
    stop_signal: str

    @property
    def overlay(self) -> Path | None:
        """``rootfs/`` beside ``recipe.toml``, if the recipe has one."""
        d = self.directory / OVERLAY_DIR
        return d if d.is_dir() else None


@dataclass(frozen=True)
class OciImage:
    """A built image: its layout, tag, manifest digest and ``manifest.json``."""

    layout: Path
    tag: str
    digest: str
    manifest: dict[str, Any]


@dataclass(frozen=True)
class OciBuild:
    """The result of :func:`build`: the image, whether it was built now, and how long that took."""

    image: OciImage
    built: bool
    seconds: float


def load(spec: str | Path) -> OciRecipe:
    """Parse and check the container recipe of ``spec`` (a name in routers/recipes or a directory)."""
    directory = resolve(spec)
    path = directory / RECIPE_FILE
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as err:
        raise RecipeError(f"{path}: not valid TOML ({err}): fix the syntax") from None
    fmt = data.get("format")
    if fmt != RECIPE_FORMAT:
        raise RecipeError(f"{path}: field 'format' is {fmt!r}: this builder reads format = {RECIPE_FORMAT}")
    if "disk" in data:
        raise RecipeError(f"{path}: has a [disk] table: it is a disk recipe, build it with `python -m routers disk`")
    if "oci" not in data:
        raise RecipeError(f'{path}: table [oci] is missing: add one with at least tag = "..."')
    deb = _field(data, "debian", dict, str(path))
    oci = _field(data, "oci", dict, str(path))
    w_deb, w_oci = f"{path} [debian]", f"{path} [oci]"
    unknown = sorted(set(oci) - set(OCI_KEYS))
    if unknown:
        raise RecipeError(f"{w_oci}: unknown field {unknown[0]!r}: use only {', '.join(OCI_KEYS)}")
    variant = _field(deb, "variant", str, w_deb)
    if variant not in VARIANTS:
        raise RecipeError(f"{w_deb}: field 'variant' is {variant!r}: use one of {', '.join(VARIANTS)}")
    packages = _strings(deb, "packages", w_deb, _NAME_RE, "a Debian package name")
    if not packages:
        raise RecipeError(f"{w_deb}: field 'packages' is empty: name at least the router software")
    tag = _field(oci, "tag", str, w_oci)
    if not _TAG_RE.match(tag):
        raise RecipeError(f"{w_oci}: field 'tag' is {tag!r}: 1-128 letters, digits, '_', '.' or '-' (not first)")
    entrypoint = _strings(oci, "entrypoint", w_oci)
    cmd = _strings(oci, "cmd", w_oci)
    if not entrypoint and not cmd:
        raise RecipeError(f"{w_oci}: neither 'entrypoint' nor 'cmd' is set: name the program the container runs")
    workdir = _field(oci, "workdir", str, w_oci, default="/")
    if not workdir.startswith("/"):
        raise RecipeError(f"{w_oci}: field 'workdir' is {workdir!r}: give an absolute path")
    stop_signal = _field(oci, "stop_signal", str, w_oci, default="SIGTERM")
    if not _SIGNAL_RE.match(stop_signal):
        raise RecipeError(f"{w_oci}: field 'stop_signal' is {stop_signal!r}: give a signal name such as SIGTERM")
    return OciRecipe(
        name=directory.name,
        directory=directory,
        description=_field(data, "description", str, str(path), default=""),
        suite=_field(deb, "suite", str, w_deb),
        variant=variant,
        architecture=_field(deb, "architecture", str, w_deb, default="amd64"),
        packages=packages,
        path_exclude=_strings(deb, "path_exclude", w_deb),
        path_include=_strings(deb, "path_include", w_deb),
        report_versions=_strings(deb, "report_versions", w_deb),
        tag=tag,
        entrypoint=entrypoint,
        cmd=cmd,
        env=_strings(oci, "env", w_oci, _ENV_RE, "NAME=value"),
        workdir=workdir,
        stop_signal=stop_signal,
    )


def key_files(recipe: OciRecipe) -> list[Path]:
    """The files the cache key covers: ``recipe.toml`` and everything under ``rootfs/``, sorted."""
    return disk_recipe.key_files(recipe)


def recipe_key(recipe: OciRecipe) -> str:
    """SHA-256 over :data:`BUILDER_FORMAT` and each key file's relative path, mode and content."""
    return disk_recipe.recipe_key(recipe, f"vrmig-oci-image {BUILDER_FORMAT}")


def image_dir(recipe_name: str, cache: Path | str | None = None) -> Path:
    """``<cache>/images/<recipe>`` (the layout is its ``oci/``)."""
    return disk_image.image_dir(recipe_name, cache)


def _run(argv: list[str], timeout: float = TOOL_TIMEOUT_S) -> str:
    """Run ``argv`` (a list, never a shell string): routers.disk_image's runner, naming this
    builder's host packages when a program is missing."""
    return disk_image._run(argv, timeout, packages=HOST_PACKAGES)


def mmdebstrap_argv(recipe: OciRecipe, target: Path, mirror: str = privapt.MIRROR) -> list[str]:
    """The mmdebstrap command line that installs ``recipe`` into the directory ``target``."""
    return disk_image.mmdebstrap_argv(recipe, target, mirror)


def image_ref(layout: Path, tag: str) -> str:
    """umoci's ``--image`` value: ``<layout>:<tag>``."""
    return f"{layout}:{tag}"


def layout_argvs(recipe: OciRecipe, tree: Path, layout: Path) -> list[list[str]]:
    """The umoci commands that turn the installed ``tree`` into the tagged image in ``layout``."""
    ref = image_ref(layout, recipe.tag)
    config = ["umoci", "config", "--image", ref, "--author", "vrmig", "--os", "linux"]
    config += ["--architecture", recipe.architecture, "--config.workingdir", recipe.workdir]
    config += ["--config.stopsignal", recipe.stop_signal, "--clear=config.env"]
    config += [f"--config.env={e}" for e in recipe.env]
    config += ["--clear=config.entrypoint", "--clear=config.cmd"]
    config += [f"--config.entrypoint={a}" for a in recipe.entrypoint]
    config += [f"--config.cmd={a}" for a in recipe.cmd]
    if recipe.description:
        config += ["--config.label", f"org.opencontainers.image.description={recipe.description}"]
    config += ["--history.comment", f"vrmig recipe {recipe.name}"]
    return [
        ["umoci", "init", "--layout", str(layout)],
        ["umoci", "new", "--image", ref],
        ["umoci", "insert", "--image", ref, "--history.comment", f"mmdebstrap {recipe.suite}", str(tree), "/"],
        config,
        ["umoci", "gc", "--layout", str(layout)],
    ]


def unpack_argv(layout: Path, tag: str, dest: Path, rootless: bool | None = None) -> list[str]:
    """``umoci raw unpack`` of ``layout:tag`` into ``dest`` (``--rootless`` unless root)."""
    if rootless is None:
        rootless = os.geteuid() != 0
    flags = ["--rootless"] if rootless else []
    return ["umoci", "raw", "unpack", *flags, "--image", image_ref(layout, tag), str(dest)]


def archive_argv(archive: Path, layout: Path, tag: str, policy: Path, ref: str | None = None) -> list[str]:
    """``skopeo copy`` of a ``docker save`` archive (image ``ref`` in it, or its only one) into ``layout:tag``."""
    src = f"docker-archive:{archive}" + (f":{ref}" if ref else "")
    return ["skopeo", "--policy", str(policy), "copy", "--quiet", src, f"oci:{layout}:{tag}"]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(disk_image.MIB), b""):
            h.update(chunk)
    return h.hexdigest()


def _blob(layout: Path, digest: str) -> Path:
    algo, _, hexdigest = digest.partition(":")
    return layout / "blobs" / algo / hexdigest


def layout_tags(layout: Path) -> dict[str, str]:
    """{tag: manifest digest} of the image layout ``layout`` ({} if it is not one)."""
    try:
        index = json.loads((Path(layout) / "index.json").read_text())
    except (OSError, ValueError):
        return {}
    tags: dict[str, str] = {}
    for desc in index.get("manifests", []) if isinstance(index, dict) else []:
        name = (desc.get("annotations") or {}).get(REF_ANNOTATION)
        if isinstance(name, str) and isinstance(desc.get("digest"), str):
            tags[name] = desc["digest"]
    return tags


def image_blobs(layout: Path, digest: str) -> list[dict[str, Any]]:
    """The descriptors an image manifest reaches: itself, its config and its layers (in order)."""
    manifest = json.loads(_blob(layout, digest).read_text())
    own = {"digest": digest, "size": _blob(layout, digest).stat().st_size, "mediaType": MANIFEST_MEDIA_TYPE}
    return [own, manifest["config"], *manifest["layers"]]


def verify_layout(layout: Path, tag: str, digest: str | None = None) -> str | None:
    """None if ``layout`` holds ``tag`` (with ``digest`` if given) and every blob of it is intact,
    else what is wrong (one phrase)."""
    tags = layout_tags(layout)
    if tag not in tags:
        return f"no image tagged {tag!r} (tags: {', '.join(sorted(tags)) or 'none'})"
    if digest is not None and tags[tag] != digest:
        return f"tag {tag!r} is {tags[tag]}, not {digest}"
    try:
        descriptors = image_blobs(layout, tags[tag])
    except (OSError, ValueError, KeyError, TypeError) as err:
        return f"the manifest of {tag!r} cannot be read ({err})"
    for desc in descriptors:
        blob = _blob(layout, desc["digest"])
        if not blob.is_file() or blob.stat().st_size != desc["size"]:
            return f"blob {desc['digest']} is missing or has the wrong size"
        if f"sha256:{_sha256(blob)}" != desc["digest"]:
            return f"blob {desc['digest']} does not match its digest"
    return None


def read_image(recipe_name: str, cache: Path | str | None = None) -> OciImage | None:
    """The built image of ``recipe_name`` if its manifest.json and layout are there, else None."""
    d = image_dir(recipe_name, cache)
    try:
        manifest = json.loads((d / MANIFEST_NAME).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
        return None
    img = manifest.get("image")
    if not isinstance(img, dict) or not isinstance(img.get("tag"), str) or not isinstance(img.get("digest"), str):
        return None
    layout = d / LAYOUT_DIR
    if not (layout / "index.json").is_file():
        return None
    return OciImage(layout=layout, tag=img["tag"], digest=img["digest"], manifest=manifest)


def up_to_date(recipe: OciRecipe, cache: Path | str | None = None) -> OciImage | None:
    """The built image if it was built from this recipe content and is intact, else None."""
    image = read_image(recipe.name, cache)
    if image is None or image.manifest.get("recipe_key") != recipe_key(recipe) or image.tag != recipe.tag:
        return None
    if verify_layout(image.layout, image.tag, image.digest) is not None:
        return None
    return image


def _check_host() -> None:
    missing = [t for t in BUILD_TOOLS if shutil.which(t) is None]
    if missing:
        raise DependencyError(f"{', '.join(missing)} not found: install {' '.join(HOST_PACKAGES)} (make apt)")
    if os.geteuid() != 0:
        raise DependencyError("building an OCI image needs root (mmdebstrap --mode=root, file ownership): run as root")


def _forget_build_host(root: Path) -> None:
    """Empty ``/etc/hostname`` and ``/etc/resolv.conf``: mmdebstrap copied the build host's there
    (for apt); a container gets its own from the runtime (the files stay as mount points)."""
    for name in HOST_FILES:
        p = root / name
        if p.is_symlink() or p.exists():
            p.unlink()
        p.write_text("")


def _drop_device_nodes(root: Path) -> list[str]:
    """Remove the device nodes, FIFOs and sockets under ``root/dev`` (a runtime mounts its own)."""
    removed = []
    for p in sorted((root / "dev").rglob("*")):
        mode = p.lstat().st_mode
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
            p.unlink()
            removed.append(p.name)
    return removed


def _tree_bytes(root: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            total += os.lstat(os.path.join(dirpath, name)).st_size
    return total


def _tool_versions() -> dict[str, str]:
    out = {}
    for tool in ("mmdebstrap", "umoci"):
        res = subprocess.run([tool, "--version"], capture_output=True, text=True, check=False)
        text = res.stdout.strip() or res.stderr.strip()
        out[tool] = text.splitlines()[0] if text else "?"
    return out


def _install_layout(new: Path, out: Path, work: Path) -> None:
    """Put the layout ``new`` at ``out/oci``, moving an older one into ``work`` (removed with it)."""
    dest = out / LAYOUT_DIR
    if dest.exists():
        os.replace(dest, work / "old-layout")
    os.replace(new, dest)


def build(spec: str | Path, cache: Path | str | None = None, force: bool = False) -> OciBuild:
    """Build the OCI image of the recipe ``spec`` (name or directory) unless it is up to date."""
    recipe = load(spec)
    t0 = time.monotonic()
    if not force and (image := up_to_date(recipe, cache)) is not None:
        return OciBuild(image=image, built=False, seconds=time.monotonic() - t0)
    _check_host()
    out = image_dir(recipe.name, cache)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".build-oci-", dir=out))
    try:
        tree, layout = work / "root", work / LAYOUT_DIR
        _run(mmdebstrap_argv(recipe, tree), MMDEBSTRAP_TIMEOUT_S)
        versions = disk_image.installed_versions(tree)
        _forget_build_host(tree)
        dropped = _drop_device_nodes(tree)
        log.info("removed %d device nodes from /dev", len(dropped))
        tree_bytes = _tree_bytes(tree)
        for argv in layout_argvs(recipe, tree, layout):
            _run(argv)
        digest = layout_tags(layout).get(recipe.tag)
        problem = verify_layout(layout, recipe.tag)
        if digest is None or problem is not None:
            raise BuildError(f"{layout}: umoci made no usable image ({problem}): rerun with -v")
        descriptors = image_blobs(layout, digest)
        seconds = time.monotonic() - t0
        manifest = {
            "format": MANIFEST_FORMAT,
            "recipe": recipe.name,
            "recipe_dir": str(recipe.directory),
            "recipe_key": recipe_key(recipe),
            "description": recipe.description,
            "suite": recipe.suite,
            "variant": recipe.variant,
            "mirror": privapt.MIRROR,
            "built": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "build_seconds": round(seconds, 1),
            "versions": reported_versions(recipe, versions),
            "packages": versions,
            "tools": _tool_versions(),
            "image": {
                "layout": LAYOUT_DIR,
                "tag": recipe.tag,
                "digest": digest,
                "config_digest": descriptors[1]["digest"],
                "layers": [d["digest"] for d in descriptors[2:]],
                "bytes": sum(d["size"] for d in descriptors),
                "tree_bytes": tree_bytes,
            },
        }
        _install_layout(layout, out, work)
        (out / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n")
    finally:
        disk_image._remove_work(work)
    image = read_image(recipe.name, cache)
    if image is None:
        raise BuildError(f"{out}: the image was built but cannot be read back: rerun with --force")
    return OciBuild(image=image, built=True, seconds=seconds)


def reported_versions(recipe: OciRecipe, versions: dict[str, str]) -> dict[str, str]:
    """The versions the recipe's ``report_versions`` names (``name*`` matches a prefix)."""
    out: dict[str, str] = {}
    for pattern in recipe.report_versions:
        if pattern.endswith("*"):
            out.update({k: v for k, v in versions.items() if k.startswith(pattern[:-1])})
        elif pattern in versions:
            out[pattern] = versions[pattern]
    return dict(sorted(out.items()))


def _fresh_dest(dest: Path, what: Path) -> Path:
    dest = Path(dest)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise BuildError(f"{dest}: exists and is not an empty directory: give a new path to unpack {what} into")
    return dest


def unpack(layout: Path | str, tag: str, dest: Path | str) -> Path:
    """The root file system of the image ``tag`` in the OCI layout ``layout``, unpacked by umoci
    into ``dest`` (new or empty); returns ``dest``.  A layout without that tag, or a damaged one,
    is one line (ProfileFileError, exit 2) before anything is written."""
    layout = Path(layout)
    dest = _fresh_dest(Path(dest), layout)
    if not (layout / "oci-layout").is_file():
        raise ProfileFileError(f"{layout}: not an OCI image layout (no oci-layout): give one, e.g. skopeo's oci:DIR")
    problem = verify_layout(layout, tag)
    if problem is not None:
        raise ProfileFileError(f"{layout}: {problem}: name a tag the layout holds, or rebuild it")
    if shutil.which("umoci") is None:
        raise DependencyError("umoci not found: install umoci (make apt)")
    _run(unpack_argv(layout, tag, dest))
    return dest


def unpack_archive(archive: Path | str, dest: Path | str, ref: str | None = None) -> Path:
    """The root file system of the image in a ``docker save`` archive (``ref`` names one if it
    holds several), converted by skopeo into an OCI layout and unpacked by :func:`unpack` into
    ``dest``; returns ``dest``."""
    archive = Path(archive)
    dest = _fresh_dest(Path(dest), archive)
    if not archive.is_file():
        raise ProfileFileError(f"{archive}: no such file: give the output of `docker save -o router.tar IMAGE`")
    if shutil.which("skopeo") is None:
        raise DependencyError("skopeo not found: install skopeo (make apt)")
    with tempfile.TemporaryDirectory(prefix="vrmig-oci-") as tmp:
        policy = Path(tmp) / "policy.json"
        policy.write_text(json.dumps(ACCEPT_ANYTHING_POLICY))
        layout = Path(tmp) / LAYOUT_DIR
        tag = "archive"
        try:
            _run(archive_argv(archive, layout, tag, policy, ref))
        except BuildError as err:
            raise ProfileFileError(f"{archive}: skopeo cannot read it as a docker save archive ({err})") from None
        return unpack(layout, tag, dest)


@dataclass(frozen=True)
class ImageConfig:
    """What an image's configuration says about running it (the OCI image spec's ``config``):
    entry point, command, environment (``NAME=value``), working directory, stop signal."""

    digest: str  # the image manifest's
    entrypoint: tuple[str, ...]
    cmd: tuple[str, ...]
    env: tuple[str, ...]
    workdir: str
    stop_signal: str

    @property
    def argv(self) -> tuple[str, ...]:
        """What the container's PID 1 runs: entry point, then command."""
        return self.entrypoint + self.cmd


def image_config(layout: Path | str, tag: str) -> ImageConfig:
    """The run configuration of the image ``tag`` in the OCI layout ``layout``; a missing tag or
    an unreadable configuration is one line (ProfileFileError, exit 2)."""
    layout = Path(layout)
    tags = layout_tags(layout)
    if tag not in tags:
        raise ProfileFileError(
            f"{layout}: no image tagged {tag!r} (tags: {', '.join(sorted(tags)) or 'none'}): name one the layout holds"
        )
    try:
        manifest = json.loads(_blob(layout, tags[tag]).read_text())
        config = json.loads(_blob(layout, manifest["config"]["digest"]).read_text()).get("config") or {}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise ProfileFileError(f"{layout}: the configuration of {tag!r} cannot be read ({err}): rebuild it") from None

    def strings(key: str) -> tuple[str, ...]:
        value = config.get(key) or []
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ProfileFileError(f"{layout}: {tag!r}: config {key} is not a list of strings: rebuild the image")
        return tuple(value)

    argv = strings("Entrypoint") + strings("Cmd")
    if not argv:
        raise ProfileFileError(f"{layout}: {tag!r} has neither Entrypoint nor Cmd: give the image an entry point")
    return ImageConfig(
        digest=tags[tag],
        entrypoint=strings("Entrypoint"),
        cmd=strings("Cmd"),
        env=strings("Env"),
        workdir=str(config.get("WorkingDir") or "/"),
        stop_signal=str(config.get("StopSignal") or "SIGTERM"),
    )
