#!/usr/bin/env python3
"""Generates the gRPC and protobuf modules of tagi_ddp from proto/.

  generate_stubs.py --proto-dir proto --out python/tagi_ddp/_proto
      [--protoc protoc] [--grpc-plugin grpc_python_plugin]

Runs protoc with Debian's grpc_python_plugin (package protobuf-compiler-grpc)
on every tagi/v1/*.proto, writes the modules flat into --out and rewrites
their imports ("from tagi.v1 import job_pb2") into relative ones, so the
generated code lives inside the tagi_ddp package instead of claiming a
top-level "tagi" package. The build (python/CMakeLists.txt) and setup.py
call it; the output is not committed.
"""
import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile


def generate(proto_dir, out, protoc, plugin):
    protos = sorted(glob.glob(os.path.join(proto_dir, "tagi", "v1", "*.proto")))
    if not protos:
        raise SystemExit(f"generate_stubs: no tagi/v1/*.proto under {proto_dir}")
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [protoc, f"-I{proto_dir}", f"--python_out={tmp}", f"--grpc_python_out={tmp}",
               f"--plugin=protoc-gen-grpc_python={plugin}"] + protos
        result = subprocess.run(cmd, capture_output=True, text=True)
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
    parser.add_argument("--protoc", default=shutil.which("protoc") or "protoc")
    parser.add_argument("--grpc-plugin",
                        default=shutil.which("grpc_python_plugin") or "grpc_python_plugin")
    args = parser.parse_args()
    generate(args.proto_dir, args.out, args.protoc, args.grpc_plugin)
    return 0


if __name__ == "__main__":
    sys.exit(main())
