"""Load a kernel file and find its verification targets.

A kernel file names what to verify in one of three ways, tried in order:

1. functions decorated with `@semcheck.target` (they carry the attribute
   `__semcheck_target__ = {"devices", "cores", "name"}`, and `"inputs"`, a
   hypothesis strategy, when the target's inputs are generated: see
   `Target.with_input`);
2. otherwise a module-level `build(num_devices, **kwargs)`;
3. or, explicitly, `entry="NAME"` (the CLI's `--entry NAME`) naming any
   module-level callable with the `build` signature.

`path::name` selects one target by name. Every target, called with a device
count, returns `(fn, example_args)`; `fn` is then traced (never run).

The file is imported as a fresh module each time (a unique module name, not
cached in `sys.modules`), with its directory on `sys.path` while it runs so
that it can import its neighbours.

Imports of jax and of the front end's jax-bound modules sit inside the functions that
need them: the CLI sets `JAX_PLATFORMS` and the fake device count before jax is first
imported (`targets.provision_devices`), and jax reads them only then; a child started warm
(`checker/run/warm_start.py`) has jax imported but no backend yet, and gets the platform as a setting.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import inspect
import itertools
import os
import sys
import traceback
import types
from collections.abc import Callable, Sequence
from typing import Any

from semcheck.checker.frontend.errors import (
    BadTargetReturn,
    DeviceProvisioningError,
    KernelFileNotFound,
    KernelRaised,
    KernelSyntaxError,
    NoTargets,
)
from semcheck.model.ops import Loc

TARGET_ATTR = "__semcheck_target__"
DEFAULT_DEVICES = (2, 4, 8)

_module_counter = itertools.count()


@dataclasses.dataclass(frozen=True)
class Target:
    """One verification target of a kernel file."""

    name: str
    builder: Callable[..., Any]
    devices: tuple[int, ...] = DEFAULT_DEVICES
    cores: int | None = None
    kind: str = "target"  # "target" | "build" | "entry"
    path: str = ""
    inputs: Any = None  # a hypothesis strategy: the builder takes (num_devices, value)
    input_text: str | None = None  # set by `with_input`: the value the builder is bound to

    def with_input(self, value: Any, text: str) -> Target:
        """This target built from one generated input: the builder called as `(num_devices, value)`.

        `text` (how reports show the value) goes into the build error's message.
        """
        builder = self.builder

        def bound(num_devices: int, **kwargs: Any) -> Any:
            return builder(num_devices, value, **_accepted_kwargs(builder, kwargs))

        bound.__name__ = getattr(builder, "__name__", self.name)
        return dataclasses.replace(self, builder=bound, inputs=None, input_text=text)

    def build_shapes(self, num_devices: int, *, abstract: bool | None = None,
                     **kwargs: Any) -> tuple[Callable[..., Any], tuple[Any, ...]] | None:
        """Run the builder with its jax computations staged out, keeping only argument shapes.

        semcheck traces the kernel, so it needs the example arguments' shapes,
        dtypes and shardings, never their values; computing and placing real
        inputs on hundreds of fake devices takes seconds. The builder runs
        under `jax.make_jaxpr`, so its jax operations are recorded, not run;
        an argument's sharding is read off the `device_put` that produced it.
        None when the builder needs concrete values (or fails there for any
        other reason): the caller then builds for real, which reports the
        kernel's own errors as usual.

        RUN-14: with `abstract` (by default `abstract_mesh_wanted(num_devices)`)
        the builder's `jax.make_mesh` gives an abstract mesh of the same shape,
        names and axis types, so that no jax device is made; when that build
        fails the builder is staged again with real devices.
        """
        if abstract is None:
            abstract = abstract_mesh_wanted(num_devices)
        if abstract:
            with abstract_make_mesh():
                built = self._staged(num_devices, kwargs)
            if built is not None:
                return built
            if not real_devices_available(num_devices):
                return None  # the caller's real build says why (DeviceProvisioningError)
        return self._staged(num_devices, kwargs)

    def _staged(self, num_devices: int, kwargs: dict[str, Any]) -> tuple[Callable[..., Any], tuple[Any, ...]] | None:
        import jax  # lazy: see the module docstring
        from jax.core import Tracer  # lazy: see the module docstring

        box: dict[str, Any] = {}

        def staged() -> list[Any]:
            result = self.builder(num_devices, **_accepted_kwargs(self.builder, kwargs))
            fn, args = check_target_return(result, self.name, self.path)
            leaves, treedef = jax.tree.flatten(args)
            box.update(fn=fn, leaves=leaves, treedef=treedef)
            return [x for x in leaves if isinstance(x, Tracer)]

        try:
            closed = jax.make_jaxpr(staged)()
        except Exception:  # noqa: BLE001 - any failure here means: build concretely instead
            return None
        shardings = _device_put_shardings(closed.jaxpr)
        specs = iter(
            jax.ShapeDtypeStruct(tuple(v.aval.shape), v.aval.dtype, sharding=shardings.get(id(v)))
            for v in closed.jaxpr.outvars
        )
        # what the builder computed is now a shape; what it handed over as is
        # (ShapeDtypeStructs, numpy arrays) stays as it is
        leaves = [next(specs) if isinstance(x, Tracer) else x for x in box["leaves"]]
        return box["fn"], tuple(jax.tree.unflatten(box["treedef"], leaves))

    def build(self, num_devices: int, **kwargs: Any) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        """Call the builder and check the shape of what it returns (with real devices: RUN-14)."""
        need_real_devices(num_devices)
        try:
            result = self.builder(num_devices, **_accepted_kwargs(self.builder, kwargs))
        except Exception as e:  # the kernel's own failure, reported as such
            on = f" on input {self.input_text}" if self.input_text is not None else ""
            raise KernelRaised(
                f"kernel raised while building target {self.name!r} for {num_devices} "
                f"devices{on}: {type(e).__name__}: {e}",
                stage="build",
                cause=e,
                path=self.path,
                loc=user_loc(e, self.path),
            ) from e
        return check_target_return(result, self.name, self.path)


def split_selector(path: str) -> tuple[str, str | None]:
    """`"file.py::name"` -> `("file.py", "name")`; plain paths select nothing."""
    if "::" in path:
        file, _, name = path.rpartition("::")
        return file, (name or None)
    return path, None


def import_kernel_file(path: str) -> types.ModuleType:
    """Import `path` as a fresh module (never reused from `sys.modules`)."""
    path = os.path.abspath(path)
    if not os.path.isfile(path):
        raise KernelFileNotFound(f"kernel file not found: {path}", path=path)
    try:
        with open(path, "rb") as f:
            source = f.read()
        code = compile(source, path, "exec")
    except SyntaxError as e:
        loc = Loc(path, e.lineno or 0, (e.text or "").strip())
        raise KernelSyntaxError(
            f"syntax error in kernel file {path}:{e.lineno}: {e.msg}", path=path, loc=loc
        ) from e
    except OSError as e:
        raise KernelFileNotFound(f"kernel file not readable: {path}: {e}", path=path) from e

    base = os.path.splitext(os.path.basename(path))[0]
    mod_name = f"_semcheck_kernel_{next(_module_counter)}_{''.join(c if c.isalnum() else '_' for c in base)}"
    spec = importlib.util.spec_from_file_location(mod_name, path)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    directory = os.path.dirname(path)
    added = directory not in sys.path
    if added:
        sys.path.insert(0, directory)
    # Kept registered (under its unique name) so that dataclasses, pickling
    # and `inspect` can find the module's source while it runs and later.
    sys.modules[mod_name] = module
    try:
        exec(code, module.__dict__)
    except Exception as e:
        sys.modules.pop(mod_name, None)
        hint = ""
        if isinstance(e, ModuleNotFoundError) and e.name == "hypothesis":
            hint = " (generated inputs need hypothesis: pip install 'semcheck[inputs]')"
        raise KernelRaised(
            f"kernel file raised during import: {type(e).__name__}: {e}{hint}",
            stage="import",
            cause=e,
            path=path,
            loc=user_loc(e, path),
        ) from e
    finally:
        if added:
            try:
                sys.path.remove(directory)
            except ValueError:
                pass
    return module


def find_targets(
    module: types.ModuleType,
    *,
    entry: str | None = None,
    select: str | None = None,
    path: str = "",
) -> list[Target]:
    """The targets of an imported kernel file, in definition order."""
    path = path or getattr(module, "__file__", "") or ""
    if entry is not None:
        fn = module.__dict__.get(entry)
        if fn is None or not callable(fn):
            raise NoTargets(f"no callable named {entry!r} in {path}", path=path)
        targets = [Target(entry, fn, kind="entry", path=path, **_marker_options(fn))]
    else:
        targets = []
        seen: set[int] = set()
        for attr, value in list(module.__dict__.items()):
            marker = getattr(value, TARGET_ATTR, None) if callable(value) else None
            if not isinstance(marker, dict) or id(value) in seen:
                continue
            seen.add(id(value))
            targets.append(
                Target(
                    str(marker.get("name") or attr),
                    value,
                    kind="target",
                    path=path,
                    **_marker_options(value),
                )
            )
        if not targets:
            build = module.__dict__.get("build")
            if callable(build):
                targets = [Target("build", build, kind="build", path=path)]
    if not targets:
        raise NoTargets(
            f"no targets in {path}: mark a function with @semcheck.target, define "
            "build(num_devices), or pass an entry name",
            path=path,
        )
    if select is not None:
        chosen = [t for t in targets if t.name == select or getattr(t.builder, "__name__", None) == select]
        if not chosen:
            fn = module.__dict__.get(select)
            if callable(fn):
                chosen = [Target(select, fn, kind="entry", path=path, **_marker_options(fn))]
        if not chosen:
            names = ", ".join(t.name for t in targets)
            raise NoTargets(f"no target named {select!r} in {path} (targets: {names})", path=path)
        targets = chosen
    return targets


def load_targets(path: str, *, entry: str | None = None, target: str | None = None,
                 selector: bool = True) -> list[Target]:
    """Import `path` and return its targets. With `selector`, `path` may carry a `::name` selector;
    without, it is a file's path as it is (a name of its own may hold `::`)."""
    file, selected = split_selector(path) if selector else (path, None)
    select = target if target is not None else selected
    module = import_kernel_file(file)
    return find_targets(module, entry=entry, select=select, path=os.path.abspath(file))


def _device_put_shardings(jaxpr: Any) -> dict[int, Any]:
    """id(var) -> the concrete sharding a top-level `device_put` gave it."""
    from jax.sharding import Sharding  # lazy: see the module docstring

    out: dict[int, Any] = {}
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "device_put":
            for var, sh in zip(eqn.outvars, eqn.params.get("devices", ())):
                if isinstance(sh, Sharding):
                    out[id(var)] = sh
    return out


def check_target_return(result: Any, name: str, path: str = "") -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """A target must return `(fn, example_args)` with `fn` callable."""
    if not (isinstance(result, (tuple, list)) and len(result) == 2):
        raise BadTargetReturn(
            f"target {name!r} must return (fn, example_args), got {_describe(result)}", path=path
        )
    fn, args = result
    if not callable(fn):
        raise BadTargetReturn(
            f"target {name!r} must return (fn, example_args): fn is {_describe(fn)}, not callable",
            path=path,
        )
    if isinstance(args, (tuple, list)):
        args = tuple(args)
    else:
        args = (args,)
    for i, a in enumerate(args):
        if not (hasattr(a, "shape") and hasattr(a, "dtype")) and not _is_pytree_of_arrays(a):
            raise BadTargetReturn(
                f"target {name!r} must return (fn, example_args): argument {i} is "
                f"{_describe(a)}, not an array or jax.ShapeDtypeStruct",
                path=path,
            )
    return fn, args


# --- device provisioning ------------------------------------------------------


def jax_initialised() -> bool:
    """True when jax's backends exist (the host device count is then fixed)."""
    if "jax" not in sys.modules:
        return False
    try:
        from jax._src import xla_bridge  # lazy: see the module docstring

        return bool(xla_bridge.backends_are_initialized())
    except Exception:  # pragma: no cover - very old or very new jax
        return True


def provision_devices(n: int) -> None:
    """Make `n` CPU host devices available to jax.

    Sets `XLA_FLAGS=--xla_force_host_platform_device_count=N` (replacing any
    earlier count) before jax initialises its backends. If jax is already
    initialised, this only checks that it has at least `n` devices and raises
    `DeviceProvisioningError` otherwise: the count cannot change inside a
    running process, so run each configuration in a fresh process.
    """
    n = int(n)
    if n < 1:
        raise ValueError(f"device count must be positive, got {n}")
    if jax_initialised():
        import jax  # lazy: see the module docstring

        have = jax.device_count()
        if have < n:
            raise DeviceProvisioningError(
                f"jax is already initialised with {have} device(s); {n} needed. "
                "Provision devices before jax initialises (one process per configuration)."
            )
        return
    flags = [
        f
        for f in os.environ.get("XLA_FLAGS", "").split()
        if not f.startswith("--xla_force_host_platform_device_count")
    ]
    flags.append(f"--xla_force_host_platform_device_count={n}")
    os.environ["XLA_FLAGS"] = " ".join(flags)  # read when the backends start, not at import
    if "JAX_PLATFORMS" not in os.environ:
        os.environ["JAX_PLATFORMS"] = "cpu"
        if "jax" in sys.modules:  # imported already (a warm child): jax read its configuration then
            import jax

            jax.config.update("jax_platforms", "cpu")


QUICK_COMPILE_FLAG = "--xla_backend_optimization_level"
"""REP-37: XLA's CPU code generation level; the checking process asks for 0 unless `XLA_FLAGS` names one."""


def compile_quickly() -> None:
    """REP-37: in semcheck's own checking process, before jax's backends start, XLA compiles at backend
    optimization level 0: the build's jax operations (`jnp.arange`, a `device_put` onto a mesh) and the
    evaluations of the front end are compiled once each and run on a few elements, so LLVM's optimization
    passes were most of their compile time and none of their run time. The level changes how the code is
    generated, not what it computes (XLA's CPU floating point is not fast-math at any level). A level the
    user's `XLA_FLAGS` sets is kept; a library caller's process is never changed (only the verify child
    calls this)."""
    flags = os.environ.get("XLA_FLAGS", "").split()
    if jax_initialised() or any(f.startswith(QUICK_COMPILE_FLAG) for f in flags):
        return
    os.environ["XLA_FLAGS"] = " ".join([*flags, f"{QUICK_COMPILE_FLAG}=0"])  # read when the backends start


def provision_for_tracing(n: int) -> None:
    """Provision `n` host devices for a trace that may not need them (RUN-14).

    Before jax's backends start this is `provision_devices(n)`: the count is only
    read when a backend starts, which an abstract-mesh trace never does, so it costs
    nothing unless a build needs real devices. Once jax runs with fewer devices, an
    abstract mesh may still trace the target: the real build refuses then
    (`need_real_devices`), not this.
    """
    if jax_initialised() and not real_devices_available(n):
        return
    provision_devices(n)


ABSTRACT_MESH_FROM = 257
"""RUN-14: from this device count on, a target is traced with an abstract mesh first. Below it jax's
fake CPU devices cost at most 0.1 s and 90 MB (1,024: 0.3 s, 300 MB; 4,096: 3.6 s, 1.2 GB; 8,960:
13.8 s, 2.9 GB, growing faster than the count), so the small counts keep the real devices every
interpret-mode ground truth was recorded with."""


def abstract_mesh_wanted(n: int) -> bool:
    """RUN-14: trace at `n` devices with an abstract mesh first: past `ABSTRACT_MESH_FROM`, or when jax
    already runs with fewer than `n` devices (only an abstract mesh can trace it then)."""
    return n >= ABSTRACT_MESH_FROM or (jax_initialised() and not real_devices_available(n))


def real_devices_available(n: int) -> bool:
    """Whether a build with real devices can have `n` of them: jax has them, or has not started yet
    (it starts with the count `provision_devices` set)."""
    if not jax_initialised():
        return True
    import jax  # lazy: see the module docstring

    return jax.device_count() >= n


def need_real_devices(n: int) -> None:
    """RUN-14: a build that needs real devices (the abstract mesh failed, or concrete inputs are read) gets
    `n` of them or a `DeviceProvisioningError` that says so."""
    if not real_devices_available(n):
        import jax  # lazy: see the module docstring

        raise DeviceProvisioningError(
            f"the target needs {n} real jax devices (it could not be traced with an abstract mesh, or its "
            f"scalar inputs are read), and jax is already initialised with {jax.device_count()}; "
            "provision devices before jax initialises (one process per configuration)."
        )


class abstract_make_mesh:
    """RUN-14: while active, `jax.make_mesh(shape, names, axis_types)` without `devices=` returns the
    `AbstractMesh` of the mesh it would make: the same axis sizes, names and axis types (jax's default,
    `Explicit`, when none are given), no devices. `devices=` and every other way of making a mesh
    (`jax.sharding.Mesh`, `jax.devices()`) stay real: a builder that reads devices gets them."""

    def __enter__(self) -> abstract_make_mesh:
        import jax  # lazy: see the module docstring
        from jax._src import sharding_impls

        real = sharding_impls.make_mesh
        self._saved = [(jax, "make_mesh", jax.make_mesh), (sharding_impls, "make_mesh", real)]

        def make_mesh(axis_sizes: Any, axis_names: Any, axis_types: Any = None, *, devices: Any = None) -> Any:
            if devices is not None:
                return real(axis_sizes, axis_names, axis_types, devices=devices)
            sizes = tuple(int(s) for s in axis_sizes)  # jax refuses what is not a sequence of ints
            if isinstance(axis_names, str):
                axis_names = (axis_names,)
            return jax.sharding.AbstractMesh(sizes, tuple(axis_names), axis_types=axis_types)

        for module, name, _ in self._saved:
            setattr(module, name, make_mesh)
        return self

    def __exit__(self, *exc: Any) -> None:
        for module, name, value in self._saved:
            setattr(module, name, value)


# --- helpers ------------------------------------------------------------------


def _marker_options(fn: Any) -> dict[str, Any]:
    marker = getattr(fn, TARGET_ATTR, None)
    if not isinstance(marker, dict):
        return {}
    opts: dict[str, Any] = {}
    if marker.get("devices"):
        opts["devices"] = tuple(int(d) for d in marker["devices"])
    if marker.get("cores") is not None:
        opts["cores"] = int(marker["cores"])
    if marker.get("inputs") is not None:
        opts["inputs"] = marker["inputs"]
    return opts


def _accepted_kwargs(fn: Callable[..., Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """Pass only the keyword arguments `fn` accepts (all of them for **kwargs)."""
    if not kwargs:
        return {}
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return dict(kwargs)
    params = sig.parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return dict(kwargs)
    names = {
        p.name
        for p in params
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    }
    return {k: v for k, v in kwargs.items() if k in names}


def _is_pytree_of_arrays(x: Any) -> bool:
    if isinstance(x, (tuple, list)):
        return all(_is_pytree_of_arrays(y) for y in x)
    if isinstance(x, dict):
        return all(_is_pytree_of_arrays(y) for y in x.values())
    return hasattr(x, "shape") and hasattr(x, "dtype") or isinstance(x, (int, float, bool))


def _describe(x: Any) -> str:
    text = repr(x)
    if len(text) > 80:
        text = text[:77] + "..."
    return f"{type(x).__name__} {text}"


def user_loc(e: BaseException, path: str) -> Loc | None:
    """The line of the user's code that raised: the innermost frame of `e`'s traceback in user code.

    User code is the kernel file and any file it runs that is not part of Python, an installed
    package (jax's tracing machinery) or semcheck: a kernel defined in a neighbour module is
    reported at its own line, not at the target file's call into it. Without such a frame, the
    innermost frame in the kernel file.
    """
    if not path:
        return None
    path = os.path.abspath(path)
    found = None
    for frame in traceback.extract_tb(e.__traceback__):
        name = os.path.abspath(frame.filename)
        if name == path or is_user_file(name):
            found = Loc(name, frame.lineno or 0, (frame.line or "").strip())
    return found


def entry_loc(e: BaseException, path: str) -> Loc | None:
    """ERR-23: the outermost frame of the user's code in `e`'s traceback (where jax or semcheck called into it:
    the kernel's body, or the target's call), when it is not the line `user_loc` reports; else None."""
    if not path:
        return None
    path = os.path.abspath(path)
    frames = [f for f in traceback.extract_tb(e.__traceback__)
              if os.path.abspath(f.filename) == path or is_user_file(os.path.abspath(f.filename))]
    if len(frames) < 2:
        return None
    first, last = frames[0], frames[-1]
    if (os.path.abspath(first.filename), first.lineno) == (os.path.abspath(last.filename), last.lineno):
        return None
    return Loc(os.path.abspath(first.filename), first.lineno or 0, (first.line or "").strip())


@functools.cache
def _library_dirs() -> tuple[str, ...]:
    """Directories whose files are not the user's: Python's library, installed packages, semcheck."""
    import importlib.util
    import sysconfig

    # found, not imported: the public package imports the run layer, which imports this one
    dirs = {os.path.abspath(d) + os.sep for name in ("semcheck", "semcheck.checker", "semcheck.model")
            for d in (importlib.util.find_spec(name).submodule_search_locations or ())}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        where = sysconfig.get_paths().get(key)
        if where:
            dirs.add(os.path.abspath(where) + os.sep)
    return tuple(sorted(dirs))


def is_user_file(name: str) -> bool:
    if not name.endswith(".py") or not os.path.exists(name):
        return False  # "<string>", frozen modules, generated code
    return not name.startswith(_library_dirs()) and "site-packages" not in name.split(os.sep)


__all__: Sequence[str] = [
    "Target",
    "split_selector",
    "import_kernel_file",
    "find_targets",
    "load_targets",
    "check_target_return",
    "provision_devices",
    "compile_quickly",
    "provision_for_tracing",
    "abstract_mesh_wanted",
    "abstract_make_mesh",
    "jax_initialised",
]
