"""The installed TensorFlow wheel, pybind11 and Python as a repository.

Like the `tf_configure` rule of TensorFlow's custom-op template, this asks
the Python that has TensorFlow installed for `tf.sysconfig`'s paths and
flags instead of hard-coding them. Which Python: `$TENSORBOW_PYTHON`
(scripts/bazel_build.sh passes the checkout's .venv), else `python3`.
"""

_QUERY = """
import json, sysconfig
import pybind11
import tensorflow as tf
print(json.dumps(dict(
    include=tf.sysconfig.get_include(),
    lib=tf.sysconfig.get_lib(),
    compile_flags=tf.sysconfig.get_compile_flags(),
    pybind11_include=pybind11.get_include(),
    python_include=sysconfig.get_paths()["include"],
)))
"""

_BUILD = """
package(default_visibility = ["//visibility:public"])

# TensorFlow's headers and the macros the wheel was built with (the C++11
# ABI, Eigen's alignment), which reach every dependent. Its other flags
# (the language standard) do not propagate: defs.bzl's TF_COPTS carries
# them to the targets that compile against TensorFlow.
cc_library(
    name = "tf_headers",
    hdrs = glob(["include/**"]),
    includes = ["include"],
    defines = {defines},
)

# libtensorflow_framework.so.2: what an op library links.
cc_library(
    name = "tf_framework",
    linkopts = ["-L{lib}", "-l:libtensorflow_framework.so.2",
                "-Wl,-rpath,{lib}"],
    deps = [":tf_headers"],
)

# libtensorflow_cc.so.2: the C API, for the runtime extension.
cc_library(
    name = "tf_c_api",
    linkopts = ["-L{lib}", "-l:libtensorflow_cc.so.2", "-Wl,-rpath,{lib}"],
    deps = [":tf_framework"],
)

cc_library(
    name = "pybind11",
    hdrs = glob(["pybind11_include/**", "python_include/**"]),
    includes = ["pybind11_include", "python_include"],
)
"""

def _tf_local_impl(ctx):
    python = ctx.os.environ.get("TENSORBOW_PYTHON", "") or ctx.attr.python
    result = ctx.execute([python, "-c", _QUERY], quiet = True)
    if result.return_code != 0:
        fail("could not ask %s for TensorFlow's build flags (run " % python +
             "scripts/setup.sh first, or set TENSORBOW_PYTHON):\n" +
             result.stderr)
    info = json.decode(result.stdout.strip().splitlines()[-1])
    defines = [f[2:] for f in info["compile_flags"] if f.startswith("-D")]
    copts = [f for f in info["compile_flags"]
             if not f.startswith("-D") and not f.startswith("-I")]
    ctx.symlink(info["include"], "include")
    ctx.symlink(info["pybind11_include"], "pybind11_include")
    ctx.symlink(info["python_include"], "python_include")
    ctx.file("BUILD", _BUILD.format(
        defines = repr(defines),
        lib = info["lib"],
    ))
    ctx.file("defs.bzl", "TF_COPTS = %r\n" % copts)

tf_local = repository_rule(
    implementation = _tf_local_impl,
    attrs = {"python": attr.string(default = "python3")},
    environ = ["TENSORBOW_PYTHON"],
    local = True,
)
