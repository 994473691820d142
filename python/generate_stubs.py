#!/usr/bin/env python3
"""Generates the gRPC and protobuf modules of tagi_ddp from proto/.

  generate_stubs.py --proto-dir proto --out python/tagi_ddp/_proto
      [--protoc protoc] [--grpc-plugin grpc_python_plugin]

Runs protoc with Debian's grpc_python_plugin (package protobuf-compiler-grpc)
on every tagi/v1/*.proto; where either is not on PATH (and neither flag
names it), the protoc of PyPI's grpcio-tools (python -m grpc_tools.protoc),
if this Python has it. Writes the modules flat into --out and rewrites
their imports ("from tagi.v1 import job_pb2") into relative ones, so the
generated code lives inside the tagi_ddp package instead of claiming a
top-level "tagi" package. The build (python/CMakeLists.txt) and setup.py
call it; the output is not committed.
"""
import argparse
import glob
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile


HINT = ("install protoc and grpc_python_plugin (Debian: apt-get install protobuf-compiler "
        "protobuf-compiler-grpc) or PyPI's grpcio-tools (pip install grpcio-tools)")


def have_grpc_tools():
    """Whether this Python can run grpcio-tools' protoc (python -m grpc_tools.protoc)."""
    return importlib.util.find_spec("grpc_tools") is not None


def have_protoc_and_plugin():
    """Whether protoc and grpc_python_plugin are on PATH (what generate() prefers)."""
    return bool(shutil.which("protoc") and shutil.which("grpc_python_plugin"))


def compiler(protoc=None, plugin=None):
    """The command that runs protoc with a Python gRPC generator: protoc and plugin
    (given, else found on PATH), else grpcio-tools' protoc; SystemExit naming what
    to install when there is neither."""
    protoc = protoc or shutil.which("protoc")
    plugin = plugin or shutil.which("grpc_python_plugin")
    if protoc and plugin:
        return [protoc, f"--plugin=protoc-gen-grpc_python={plugin}"]
    if have_grpc_tools():
        return [sys.executable, "-m", "grpc_tools.protoc"]
    missing = " and ".join(n for n, v in (("protoc", protoc), ("grpc_python_plugin", plugin))
                           if not v)
    raise SystemExit(f"generate_stubs: {missing} not found on PATH, and {sys.executable} has "
                     f"no grpc_tools: {HINT}")


def generate(proto_dir, out, protoc=None, plugin=None):
    protos = sorted(glob.glob(os.path.join(proto_dir, "tagi", "v1", "*.proto")))
    if not protos:
        raise SystemExit(f"generate_stubs: no tagi/v1/*.proto under {proto_dir}")
    with tempfile.TemporaryDirectory() as tmp:
        cmd = compiler(protoc, plugin) + [f"-I{proto_dir}", f"--python_out={tmp}",
                                          f"--grpc_python_out={tmp}"] + protos
        try:
            result = subprocess.run(cmd, capture_output=True, text=True)
        except OSError as e:
            raise SystemExit(f"generate_stubs: cannot run {cmd[0]}: {e}; {HINT}") from None
        if result.returncode != 0:
            raise SystemExit(f"generate_stubs: {' '.join(cmd)} failed:\n{result.stderr}")
        os.makedirs(out, exist_ok=True)
        written = []
        for path in sorted(glob.glob(os.path.join(tmp, "tagi", "v1", "*.py"))):
            with open(path, encoding="utf-8") as f:
                text = f.read()
            text = re.sub(r"^from tagi\.v1 import ", "from . import ", text, flags=re.M)
            name = os.path.basename(path)
            with open(os.path.join(out, name), "w", encoding="utf-8") as f:
                f.write(text)
            written.append(name)
        with open(os.path.join(out, "__init__.py"), "w", encoding="utf-8") as f:
            f.write('"""Generated from proto/tagi/v1 by python/generate_stubs.py; not edited."""\n')
    return written


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--proto-dir", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--protoc", help="default: protoc on PATH")
    parser.add_argument("--grpc-plugin", help="default: grpc_python_plugin on PATH")
    args = parser.parse_args()
    generate(args.proto_dir, args.out, args.protoc, args.grpc_plugin)
    return 0


if __name__ == "__main__":
    sys.exit(main())
