"""What an image build borrows from this machine, as files for secret mounts.

scripts/docker_build.sh passes each file it writes to `docker build` as a
BuildKit secret: the Dockerfile mounts it for the one `RUN` that needs it,
so none of them is ever in a layer of the image. They differ per machine
and are never committed.

    python3 scripts/docker/host_config.py OUTDIR

writes into OUTDIR, each only when the host has something to give:

* `debian.sources`: the host's apt mirror for Debian bookworm (deb822),
  read from its apt sources; mounted over the image's own sources while
  apt runs.
* `ca-certificates.crt`: the CA bundle the host's pip trusts (its `cert`
  setting, else the system bundle, which holds the machine's own CAs from
  /usr/local/share/ca-certificates), so that pip in the build trusts the
  same TLS the host's network presents.
* `pip.conf`: the host's index settings that mean the same in a container
  (web addresses only: its local find-links, constraints and file://
  indexes are left out), with `cert` naming the bundle above as the build
  mounts it.

Standard library only: it runs with the host's python3 before any
virtualenv exists.
"""
import os
import re
import subprocess
import sys

# The Debian release the Dockerfile's base image runs.
RELEASE = "bookworm"
SUITES = (RELEASE, RELEASE + "-updates", RELEASE + "-security",
          RELEASE + "-backports")
SYSTEM_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
# Where the Dockerfile's secret mounts put the files (BuildKit's default).
SECRETS_DIR = "/run/secrets"
# pip settings carried into the build; any other (find-links, constraint,
# no-index, cache-dir, ...) names this machine's disk or is a choice the
# build makes itself.
PIP_KEYS = ("index-url", "extra-index-url", "trusted-host", "timeout",
            "default-timeout", "retries", "proxy")


def apt_mirror():
  """The host's bookworm entries as deb822 stanzas ("" when it has none)."""
  try:
    listed = subprocess.run(
        ["apt-get", "indextargets", "--format",
         "$(TARGET_OF) $(REPO_URI) $(RELEASE) $(COMPONENT)",
         "Created-By: Packages"],
        capture_output=True, text=True, check=True).stdout
  except (OSError, subprocess.CalledProcessError):
    return ""
  stanzas = []
  for line in sorted(set(listed.splitlines())):
    target_of, uri, suite, component = (line.split() + [""] * 4)[:4]
    if target_of == "deb" and suite in SUITES and component:
      stanzas.append(
          f"Types: deb\nURIs: {uri}\nSuites: {suite}\n"
          f"Components: {component}\n"
          "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n")
  return "\n".join(stanzas)


def pip_settings():
  """The host pip's settings, {key: value}: its environment over its files.

  `pip config list` prints the merged files as `global.key='value'` (or
  `install.`, `download.`) and the PIP_* environment as `:env:.key=...`.
  """
  try:
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"],
        capture_output=True, text=True, check=True).stdout
  except (OSError, subprocess.CalledProcessError):
    return {}
  from_files, from_env = {}, {}
  for line in listed.splitlines():
    match = re.match(r"^([^.]*)\.([\w-]+)='(.*)'$", line)
    if match:
      section, key, value = match.groups()
      (from_env if section == ":env:" else from_files)[key] = value
  return {**from_files, **from_env}


def web_only(key, value):
  """`value` with only its web addresses, for the keys that hold indexes."""
  if key not in ("index-url", "extra-index-url"):
    return value
  return " ".join(url for url in value.split()
                  if url.startswith(("http://", "https://")))


def main(outdir):
  os.makedirs(outdir, exist_ok=True)
  sources = apt_mirror()
  if sources:
    with open(os.path.join(outdir, "debian.sources"), "w") as f:
      f.write(sources)
  settings = pip_settings()
  bundle = settings.get("cert") or SYSTEM_BUNDLE
  lines = []
  if os.path.isfile(bundle):
    with open(bundle, "rb") as src, \
        open(os.path.join(outdir, "ca-certificates.crt"), "wb") as dst:
      dst.write(src.read())
    lines.append(f"cert = {SECRETS_DIR}/ca-certificates.crt")
  for key in PIP_KEYS:
    value = web_only(key, settings.get(key, ""))
    if value:
      lines.append(f"{key} = {value}")
  if lines:
    with open(os.path.join(outdir, "pip.conf"), "w") as f:
      f.write("[global]\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
  if len(sys.argv) != 2:
    sys.exit(__doc__)
  main(sys.argv[1])
