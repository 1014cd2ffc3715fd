"""The JAX CPU path's launches as XLA FFI custom calls into the Triton interpreter.

A `jax.pure_callback` cannot run inside a custom partitioning (JAX hands its callbacks to the
executable by index, and the partitioner lowers them into a module that is thrown away:
jax-ml/jax#23620), so with pure callbacks a batch-sharded jit on CPU devices gathered the batch.
Here each launch is instead a plain FFI custom call (`jax.ffi.ffi_call`) to one handler, a ctypes
function registered with XLA once per process; the call's `launch_id` attribute names the launch
(kernel, grid, arguments) in a registry kept for the life of the process. A plain custom call is
partitioned like jax-triton's GPU calls, so every device runs its own requests.

The handler speaks XLA's FFI C ABI (xla/ffi/api/c_api.h): it answers the metadata query made at
registration, reads the buffers of the call frame, checks their dtypes and shapes against the
registered launch, runs the kernel with the outputs written in place, and turns any Python exception
into an XLA error (so a failure raises in the caller, never returns an unwritten output).
`register()` returns False where this jaxlib does not take the handler; the CPU path then falls back
to pure_callback, unpartitioned.

The fence around XLA's C ABI, written here by hand: the handler is registered only on the jaxlib
versions CI runs it with (VERIFIED_JAXLIB; `JSAMPLE_JAX_CPU_PATH=pure_callback` forces the fallback,
`=ffi` the handler on another jaxlib), and every struct it reads is checked first (struct_size at
least the layout written here, the API's major version, the attribute's type, name and dtype): a
mismatch is an XLA error naming jsample, never a read past a struct. `path()` says which path runs.
"""

import ctypes
import os
import threading

import numpy as np

TARGET_NAME = "jsample_interpreted_launch"
_FFI_API_VERSION = (0, 1)  # the C ABI version this handler is written against
_ERROR_INTERNAL = 13  # XLA_FFI_Error_Code_INTERNAL
_EXTENSION_METADATA = 1  # XLA_FFI_Extension_Metadata
_ATTR_SCALAR = 3  # XLA_FFI_AttrType_SCALAR
_DTYPE_S64 = 5  # XLA_FFI_DataType_S64
# jaxlib minor versions whose FFI ABI CI runs this handler with (the suite, and .ci/packaging.sh's newest JAX)
VERIFIED_JAXLIB = ((0, 10), (0, 11), (0, 12))
# XLA_FFI_DataType of each NumPy dtype the kernels take (xla/ffi/api/c_api.h)
_FFI_DTYPES = {"bool": 1, "int8": 2, "int16": 3, "int32": 4, "int64": 5, "uint8": 6, "uint16": 7, "uint32": 8,
               "uint64": 9, "float16": 10, "float32": 11, "float64": 12, "bfloat16": 16}


class _ExtensionBase(ctypes.Structure):
    pass


_ExtensionBase._fields_ = [("struct_size", ctypes.c_size_t), ("type", ctypes.c_int),
                           ("next", ctypes.POINTER(_ExtensionBase))]


class _ApiVersion(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", ctypes.c_void_p),
                ("major_version", ctypes.c_int), ("minor_version", ctypes.c_int)]


class _Metadata(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("api_version", _ApiVersion), ("traits", ctypes.c_uint32)]


class _MetadataExtension(ctypes.Structure):
    _fields_ = [("extension_base", _ExtensionBase), ("metadata", ctypes.c_void_p)]


class _List(ctypes.Structure):  # XLA_FFI_Args and XLA_FFI_Rets
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", ctypes.c_void_p), ("size", ctypes.c_int64),
                ("types", ctypes.POINTER(ctypes.c_int)), ("items", ctypes.POINTER(ctypes.c_void_p))]


class _Attrs(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", ctypes.c_void_p), ("size", ctypes.c_int64),
                ("types", ctypes.POINTER(ctypes.c_int)), ("names", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(ctypes.c_void_p))]


class _CallFrame(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", ctypes.POINTER(_ExtensionBase)),
                ("api", ctypes.c_void_p), ("ctx", ctypes.c_void_p), ("stage", ctypes.c_int), ("args", _List),
                ("rets", _List), ("attrs", _Attrs)]


class _Buffer(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", ctypes.c_void_p), ("dtype", ctypes.c_int),
                ("data", ctypes.c_void_p), ("rank", ctypes.c_int64), ("dims", ctypes.POINTER(ctypes.c_int64))]


class _Scalar(ctypes.Structure):
    _fields_ = [("dtype", ctypes.c_int), ("value", ctypes.POINTER(ctypes.c_int64))]


class _ByteSpan(ctypes.Structure):
    _fields_ = [("ptr", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class _ErrorCreateArgs(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", ctypes.c_void_p), ("message", ctypes.c_char_p),
                ("errc", ctypes.c_int)]


class _ApiHead(ctypes.Structure):  # the start of XLA_FFI_Api, up to XLA_FFI_Error_Create
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", ctypes.c_void_p), ("api_version", _ApiVersion),
                ("internal_api", ctypes.c_void_p), ("error_create", ctypes.c_void_p)]


_ERROR_CREATE = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.POINTER(_ErrorCreateArgs))
_HANDLER = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.POINTER(_CallFrame))


class HostLaunch:
    """One registered launch: runs `task(inputs, outputs)` on NumPy views of the call's buffers, after
    checking them against the dtypes and shapes it was registered with."""

    def __init__(self, task, in_types, out_types):
        self.task = task
        self.in_types = in_types  # ((dtype name, shape), ...)
        self.out_types = out_types

    def views(self, frame_list, types, what):
        if frame_list.size != len(types):
            raise RuntimeError(f"jsample host launch: {frame_list.size} {what}, expected {len(types)}")
        arrays = []
        for i, (dtype_name, shape) in enumerate(types):
            buffer = ctypes.cast(frame_list.items[i], ctypes.POINTER(_Buffer)).contents
            _check_size(buffer, _Buffer, f"{what} {i}'s XLA_FFI_Buffer")
            dims = tuple(buffer.dims[d] for d in range(buffer.rank))
            if buffer.dtype != _FFI_DTYPES[dtype_name] or dims != tuple(shape):
                raise RuntimeError(f"jsample host launch: {what} {i} is a buffer of XLA dtype {buffer.dtype} and "
                                   f"shape {dims}, expected {dtype_name} {tuple(shape)}")
            dtype = np.dtype(_numpy_dtype(dtype_name))
            size = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
            if size == 0:
                arrays.append(np.empty(dims, dtype))
                continue
            raw = (ctypes.c_char * size).from_address(buffer.data)
            arrays.append(np.frombuffer(raw, dtype=dtype).reshape(dims))
        return arrays

    def __call__(self, frame):
        inputs = self.views(frame.args, self.in_types, "argument")
        outputs = self.views(frame.rets, self.out_types, "result")
        self.task(inputs, outputs)


def _numpy_dtype(name: str):
    if name == "bfloat16":
        import ml_dtypes

        return ml_dtypes.bfloat16
    return name


_lock = threading.Lock()
_launches: list = []  # launch_id -> HostLaunch, kept for the life of the process (XLA holds only the id)
_ids: dict = {}  # the launch's key -> launch_id
_registered = None  # None: not tried yet; then True or False
_handler_ref = None  # the ctypes function XLA calls: must never be collected


def launch_id(key, make_launch) -> int:
    """The id of the launch identified by `key` (hashable), registering `make_launch()` the first time:
    the same launch traced again reuses its id, so the registry grows with distinct launches only."""
    with _lock:
        found = _ids.get(key)
        if found is None:
            found = _ids[key] = len(_launches)
            _launches.append(make_launch())
        return found


class _AbiMismatch(RuntimeError):
    pass


def _check_size(struct, layout, name: str) -> None:
    """XLA's structs begin with their size: at least the layout written here (later fields may follow)."""
    if struct.struct_size < ctypes.sizeof(layout):
        raise _AbiMismatch(f"jsample host launch: XLA's {name} has struct_size {struct.struct_size}, expected at "
                           f"least {ctypes.sizeof(layout)}: this jaxlib's FFI ABI differs from the one jsample's "
                           "handler reads; set JSAMPLE_JAX_CPU_PATH=pure_callback")


def _api_head(frame):
    head = ctypes.cast(frame.api, ctypes.POINTER(_ApiHead)).contents
    if head.struct_size < ctypes.sizeof(_ApiHead) or head.api_version.major_version != _FFI_API_VERSION[0]:
        return None
    return head


def _error(frame, message: str):
    head = _api_head(frame)
    if head is None:  # no error can be made with an API of another layout: abort rather than return unwritten outputs
        os.write(2, f"jsample: XLA's FFI API has another layout; cannot report: {message}\n".encode())
        os.abort()
    create = _ERROR_CREATE(head.error_create)
    args = _ErrorCreateArgs(ctypes.sizeof(_ErrorCreateArgs), None, message.encode(), _ERROR_INTERNAL)
    return create(ctypes.byref(args))


def _answer_metadata(extension) -> None:
    """Writes the handler's FFI version into XLA_FFI_Metadata, where its struct_size says it has the
    layout written here; any other layout is left unanswered, and XLA refuses the registration
    (register() then falls back to pure_callback)."""
    pointer = ctypes.cast(extension, ctypes.POINTER(_MetadataExtension)).contents.metadata
    size = ctypes.cast(pointer, ctypes.POINTER(ctypes.c_size_t)).contents.value
    if size >= _Metadata.traits.offset + ctypes.sizeof(ctypes.c_uint32):
        metadata = ctypes.cast(pointer, ctypes.POINTER(_Metadata)).contents
        metadata.api_version.major_version, metadata.api_version.minor_version = _FFI_API_VERSION
        metadata.traits = 0


def _handle(frame_pointer):
    frame = frame_pointer.contents
    try:
        if frame.extension_start:  # registration asks for the handler's FFI version
            extension = frame.extension_start
            if extension.contents.type == _EXTENSION_METADATA:
                _answer_metadata(extension)
            return None
        _check_size(frame, _CallFrame, "XLA_FFI_CallFrame")
        for part, layout, name in ((frame.args, _List, "XLA_FFI_Args"), (frame.rets, _List, "XLA_FFI_Rets"),
                                   (frame.attrs, _Attrs, "XLA_FFI_Attrs")):
            _check_size(part, layout, name)
        launch = _launches[_launch_id(frame.attrs)]
        launch(frame)
        return None
    except BaseException as error:  # an exception must not cross the C boundary: XLA raises it in the caller
        try:
            return _error(frame, f"{type(error).__name__}: {error}")
        except BaseException:
            return None


def _launch_id(attrs) -> int:
    """The call's one attribute, checked: a scalar int64 named launch_id, naming a registered launch."""
    if attrs.size != 1:
        raise RuntimeError(f"jsample host launch: {attrs.size} attributes, expected launch_id only")
    if attrs.types[0] != _ATTR_SCALAR:
        raise _AbiMismatch(f"jsample host launch: attribute 0 has XLA attribute type {attrs.types[0]}, expected a "
                           f"scalar ({_ATTR_SCALAR})")
    name = ctypes.cast(attrs.names, ctypes.POINTER(ctypes.POINTER(_ByteSpan)))[0].contents
    if ctypes.string_at(name.ptr, name.len) != b"launch_id":
        raise _AbiMismatch(f"jsample host launch: attribute 0 is named {ctypes.string_at(name.ptr, name.len)!r}, "
                           "expected b'launch_id'")
    scalar = ctypes.cast(attrs.attrs[0], ctypes.POINTER(_Scalar)).contents
    if scalar.dtype != _DTYPE_S64:
        raise _AbiMismatch(f"jsample host launch: launch_id has XLA dtype {scalar.dtype}, expected int64 "
                           f"({_DTYPE_S64})")
    value = scalar.value.contents.value
    if not 0 <= value < len(_launches):
        raise RuntimeError(f"jsample host launch: launch_id {value} names no registered launch")
    return value


def _jaxlib_version() -> tuple:
    import jaxlib

    return tuple(int(part) for part in jaxlib.__version__.split(".")[:2])


def path() -> str:
    """The JAX CPU path's launches: "ffi" (this module's handler) or "pure_callback" (the fallback)."""
    return "ffi" if register() else "pure_callback"


def register() -> bool:
    """Registers the handler with XLA's CPU platform (once); False where this jaxlib is not one CI verifies
    (VERIFIED_JAXLIB; JSAMPLE_JAX_CPU_PATH overrides: "pure_callback" or "ffi"), or refuses it."""
    global _registered, _handler_ref
    with _lock:
        if _registered is None:
            choice = os.environ.get("JSAMPLE_JAX_CPU_PATH", "")
            if choice not in ("", "ffi", "pure_callback"):
                raise ValueError(f"JSAMPLE_JAX_CPU_PATH must be 'ffi' or 'pure_callback', got {choice!r}.")
            if choice == "pure_callback" or (not choice and _jaxlib_version() not in VERIFIED_JAXLIB):
                _registered = False
                return _registered
            try:
                import jax

                _handler_ref = _HANDLER(_handle)
                new_capsule = ctypes.pythonapi.PyCapsule_New
                new_capsule.restype = ctypes.py_object
                new_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
                capsule = new_capsule(ctypes.cast(_handler_ref, ctypes.c_void_p).value, None, None)
                jax.ffi.register_ffi_target(TARGET_NAME, capsule, platform="cpu")
                _registered = True
            except Exception:
                _registered = False
        return _registered
