"""The generated protobuf and gRPC modules (tagi_ddp/_proto, made by the build).

They are generated from proto/ by python/generate_stubs.py: by the CMake
target python_stubs, or by setup.py when the package is installed. Missing
modules raise ImportError saying how to make them.
"""
try:
    from ._proto import job_pb2, jobs_pb2, jobs_pb2_grpc  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the build
    raise ImportError(
        f"tagi_ddp's generated gRPC modules are missing ({e}): build them with "
        f"`cmake --build build --target python_stubs` (needs protobuf-compiler and "
        f"protobuf-compiler-grpc) or install the package with `pip install ./python`") from e
