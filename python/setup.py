"""Installs tagi_ddp; generates its gRPC modules from ../proto when they are missing.

The build (python/CMakeLists.txt, target python_stubs) normally writes them
into tagi_ddp/_proto; a plain `pip install ./python` without a build runs
generate_stubs.py here, before setuptools looks for the packages, which
needs protoc and grpc_python_plugin (Debian: protobuf-compiler,
protobuf-compiler-grpc).
"""
import os
import subprocess
import sys

from setuptools import setup

HERE = os.path.dirname(os.path.abspath(__file__))
STUBS = os.path.join(HERE, "tagi_ddp", "_proto")

if not os.path.exists(os.path.join(STUBS, "jobs_pb2_grpc.py")):
    subprocess.check_call([sys.executable, os.path.join(HERE, "generate_stubs.py"),
                           "--proto-dir", os.path.join(HERE, "..", "proto"), "--out", STUBS])

setup()
