"""Checks that an image holds none of what its build borrowed from the host.

    python3 scripts/docker/check_image.py IMAGE

scripts/docker_build.sh runs it after every build. It reads every layer of
IMAGE (`docker save`), not only the final file system, since a file a later
layer deletes is still in the earlier one, and fails if any of them holds:

* one of the host's own CA certificates (/usr/local/share/ca-certificates,
  what the host adds to Debian's bundle), in PEM or DER form, in any file:
  a bundle `update-ca-certificates` wrote, Java's keystore, a copy;
* a pip configuration file (`pip.conf`, `pip.ini`), anywhere;
* a file under /run/secrets, where the build mounts the host's files;

nor may the image's configuration set a PIP_* variable. Prints what it
checked. Standard library only.
"""
import base64
import glob
import json
import os
import re
import subprocess
import sys
import tarfile

HOST_CAS = "/usr/local/share/ca-certificates"
PIP_FILES = ("pip.conf", "pip.ini")
# Larger files are model weights, libraries and wheels' payloads, not
# certificate stores; reading them would only cost time.
MAX_SCANNED_BYTES = 16 << 20
PEM = re.compile(rb"-----BEGIN CERTIFICATE-----(.+?)-----END CERTIFICATE-----",
                 re.S)


def host_certificates():
  """{file name: DER bytes} of each certificate the host adds."""
  found = {}
  for path in glob.glob(os.path.join(HOST_CAS, "**", "*.crt"),
                        recursive=True):
    with open(path, "rb") as f:
      for i, body in enumerate(PEM.findall(f.read())):
        found[f"{os.path.relpath(path, HOST_CAS)}#{i}"] = base64.b64decode(
            b"".join(body.split()))
  return found


def holds(data, der):
  """Whether `data` holds certificate `der`, as DER or as PEM text."""
  if der in data:
    return True
  pem = base64.b64encode(der)
  return b"CERTIFICATE" in data and pem in b"".join(data.split())


def check_layer(layer, certificates, problems):
  """Adds to `problems` what one layer's tar stream holds; returns files."""
  files = 0
  for member in layer:
    name = "/" + member.name.lstrip("./")
    base = os.path.basename(name)
    if base in PIP_FILES or (name.startswith("/run/secrets/")
                             and not member.isdir()):
      problems.append(f"{name}: a host file's place")
    if not member.isfile():
      continue
    files += 1
    if member.size > MAX_SCANNED_BYTES:
      continue
    data = layer.extractfile(member).read()
    for cert, der in certificates.items():
      if holds(data, der):
        problems.append(f"{name}: holds the host's CA {cert}")
  return files


def main(image):
  certificates = host_certificates()
  problems, layers, files = [], 0, 0
  save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE)
  with tarfile.open(fileobj=save.stdout, mode="r|") as archive:
    for member in archive:
      if member.name.endswith(".json") and member.isfile():
        config = json.load(archive.extractfile(member))
        env = config.get("config", {}).get("Env", []) if isinstance(
            config, dict) else []
        problems += [f"image config sets {v}" for v in env
                     if v.startswith("PIP_")]
      elif member.name.endswith("layer.tar") and member.isfile():
        with tarfile.open(fileobj=archive.extractfile(member),
                          mode="r|") as layer:
          files += check_layer(layer, certificates, problems)
        layers += 1
  if save.wait() != 0:
    sys.exit(f"error: `docker save {image}` failed")
  print(f"{image}: {layers} layers, {files} files read; looked for the "
        f"host's {len(certificates)} CA certificate(s) from {HOST_CAS}, pip "
        "configuration files and /run/secrets")
  for problem in problems:
    print("  " + problem, file=sys.stderr)
  if problems:
    sys.exit(f"error: {image} holds what its build borrowed from the host")
  print(f"{image}: none found")


if __name__ == "__main__":
  if len(sys.argv) != 2:
    sys.exit(__doc__)
  main(sys.argv[1])
