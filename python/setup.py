"""Installs tagi_ddp; generates its gRPC modules from ../proto when they are missing.

The build (python/CMakeLists.txt, target python_stubs) normally writes them
into tagi_ddp/_proto; a plain `pip install ./python` without a build runs
generate_stubs.py here, which needs protoc and grpc_python_plugin (Debian:
protobuf-compiler, protobuf-compiler-grpc).
"""
import os
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


class BuildWithStubs(build_py):
    def run(self):
        out = os.path.join(HERE, "tagi_ddp", "_proto")
        if not os.path.exists(os.path.join(out, "jobs_pb2_grpc.py")):
            proto = os.path.join(HERE, "..", "proto")
            subprocess.check_call([sys.executable, os.path.join(HERE, "generate_stubs.py"),
                                   "--proto-dir", proto, "--out", out])
        super().run()


setup(cmdclass={"build_py": BuildWithStubs})
