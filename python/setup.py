"""Installs tagi_ddp; generates its gRPC modules from ../proto when they are missing.

The build (python/CMakeLists.txt, target python_stubs) normally writes them
into tagi_ddp/_proto; a plain `pip install ./python` without a build runs
generate_stubs.py here, before setuptools looks for the packages. That needs
protoc and grpc_python_plugin (Debian: protobuf-compiler,
protobuf-compiler-grpc), written into tagi_ddp/_proto as the build does, or
else PyPI's grpcio-tools, written into build/ for the wheel alone. Where
there is neither, a build with pip's build isolation asks for grpcio-tools
(setup_requires, which setuptools' PEP 517 backend hands to pip as a build
requirement) and generates with it; any other build stops naming what to
install.

pip builds a wheel, with setuptools' bdist_wheel command: setuptools 70.1 and
later have it, older ones take it from the `wheel` package. An isolated
build (pip's default) fetches what it needs; with --no-build-isolation the
environment's own setuptools must have it, and where it does not, this stops
with that hint instead of setuptools' bare "invalid command 'bdist_wheel'".
"""
import importlib.util
import os
import sys

import setuptools
from setuptools import setup

HERE = os.path.dirname(os.path.abspath(__file__))
STUBS = os.path.join(HERE, "tagi_ddp", "_proto")
TOOLS_STUBS = "build/grpc_tools_proto"  # relative to HERE, as setuptools wants package_dir

# setuptools' PEP 517 backend runs this file once per hook, with sys.argv naming
# the command: "egg_info" to learn the build requirements, then "dist_info" (the
# metadata) and "bdist_wheel" (the wheel).
COMMANDS = set(sys.argv[1:])
WHEEL_COMMANDS = {"dist_info", "bdist_wheel"}


def has_bdist_wheel():
    return (importlib.util.find_spec("setuptools.command.bdist_wheel") is not None
            or importlib.util.find_spec("wheel") is not None)


if COMMANDS & WHEEL_COMMANDS and not has_bdist_wheel():
    sys.exit(
        f"error: tagi-ddp: this environment's setuptools ({setuptools.__version__}, "
        f"{os.path.dirname(setuptools.__file__)}) has no bdist_wheel command, which pip needs "
        f"to build the package; setuptools before 70.1 takes it from the `wheel` package, "
        f"which is not installed. pip install --no-build-isolation builds with the "
        f"environment's own tools: drop --no-build-isolation (pip then fetches setuptools "
        f"from the package index), or first install `wheel` (Debian: python3-wheel) or "
        f"setuptools>=70.1 into {sys.prefix}.")

setup_requires = []
package_dir = {}
if not os.path.exists(os.path.join(STUBS, "jobs_pb2_grpc.py")):
    sys.path.insert(0, HERE)
    import generate_stubs

    if generate_stubs.have_protoc_and_plugin():
        generate_stubs.generate(os.path.join(HERE, "..", "proto"), STUBS)
    elif generate_stubs.have_grpc_tools():
        # Its modules need a protobuf and a grpcio as new as itself, which this
        # wheel's environment gets from the index but the checkout's users (say,
        # Debian's python3) may not have: they go into build/, for this wheel only.
        generate_stubs.generate(os.path.join(HERE, "..", "proto"),
                                os.path.join(HERE, TOOLS_STUBS))
        package_dir["tagi_ddp._proto"] = TOOLS_STUBS
    elif "egg_info" in COMMANDS and not COMMANDS & WHEEL_COMMANDS:
        # Learning the build requirements: an isolated build installs grpcio-tools
        # and runs this file again, which then generates the modules with it.
        setup_requires = ["grpcio-tools"]
    else:
        generate_stubs.compiler()  # stops, naming what to install

setup(setup_requires=setup_requires, package_dir=package_dir)
