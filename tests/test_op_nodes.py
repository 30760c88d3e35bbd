"""One definition of each TensorBow op's inputs (tensorbow/op_nodes.py).

A TensorBow op's NodeDef is built from its inputs and attrs given by their
names in cc/ops/, in the op's order whatever the order given; a name the
op does not have, or a missing one, is refused.

The rewrite writes the execution graph's TensorBow ops so; the kernel
tests build the same ops through ops.py's wrappers or, where there is
none, the library's generated functions. Every node of a NodeDef-built op
type in the execution graphs of a few models is built again, in the same
graph, the way the kernel tests build it, from the same tensors picked by
what they are (a constant by its value, a variable by its name, the
replica index by its placeholder): both must read the same inputs in the
same order and carry the same attrs, those copied from the user's apply
op set as the model set them.
"""
import inspect
import re

import numpy as np
import pytest
import tensorflow as tf

import tensorbow as tb
from tensorbow import op_nodes
from tensorbow import ops as tb_ops
from tensorbow.rewrite import builder as tb_builder

import graphs

tf1 = tf.compat.v1
# Distinct and exact in float16: each scalar input is known by its value.
LR, MOMENTUM, ALPHA, MU = 0.125, 0.75, 0.25, 0.5
SCALARS = {LR: "lr", MOMENTUM: "momentum", ALPHA: "alpha",
           MU: "central_momentum"}
TWO_CPUS = tf1.ConfigProto(device_count={"CPU": 2})
DEVICES = ["/cpu:0", "/cpu:1"]

# TensorBow op types production makes through the library's generated
# functions, which are the op's definition: nothing to compare.
GENERATED = frozenset([
    "TensorBowReplicaHandles", "TensorBowReplicaMean", "TensorBowSetReplicas",
    "TensorBowStackReplicas", "TensorBowSumDeviceCopies",
    "TensorBowResourceSumDeviceCopies", "TensorBowLocalSgdExchange",
    "TensorBowSetSmaParticipants", "TensorBowResetSmaBarriers"])


def _wrapped(short, r, a):
  """The op ops.py's wrapper builds for a node of type
  TensorBow[Resource]`short`, from the node's roles `r` and attrs `a`."""
  locking = dict(use_locking=a["use_locking"])
  if short == "ApplySmaGradientDescent":
    return tb_ops.apply_sma_gradient_descent(
        var=r["var"], correction=r["correction"], central=r["central"],
        alpha=r["alpha"], lr=r["lr"], delta=r["gradient"], **locking)
  if short == "ApplySmaMomentum":
    return tb_ops.apply_sma_momentum(
        var=r["var"], accum=r["accum"], correction=r["correction"],
        central=r["central"], alpha=r["alpha"], lr=r["lr"],
        grad=r["gradient"], momentum=r["momentum"],
        use_nesterov=a["use_nesterov"], **locking)
  if short == "SmaCorrection":
    return tb_ops.sma_correction(var=r["var"], correction=r["correction"],
                                 central=r["central"], alpha=r["alpha"],
                                 **locking)
  if short == "ApplySmaCorrection":
    return tb_ops.apply_sma_correction(var=r["var"],
                                       correction=r["correction"],
                                       dtype=a["T"], **locking)
  if short.endswith("WithCentral"):
    common = dict(
        var=r["var"], central=r["central"], central_prev=r["central_prev"],
        next_central=r["next"], alpha=r["alpha"], lr=r["lr"],
        central_momentum=r["central_momentum"], replica=a["replica"],
        num_replicas=a["num_replicas"], barrier=a["barrier"],
        replica_index=r["replica"], first_replica=a["first_replica"],
        stagger=a["stagger"], **locking)
    if short == "ApplySmaGradientDescentWithCentral":
      return tb_ops.resource_apply_sma_gradient_descent_with_central(
          delta=r["gradient"], **common)
    return tb_ops.resource_apply_sma_momentum_with_central(
        accum=r["accum"], grad=r["gradient"], momentum=r["momentum"],
        use_nesterov=a["use_nesterov"], **common)
  if short == "ApplyGradientDescentOuter":
    return tb_ops.apply_outer(var=r["var"], accum=None, lr=r["lr"],
                              a=r["a"], b=r["gradient"], **locking)
  assert short == "ApplyMomentumOuter", short
  return tb_ops.apply_outer(var=r["var"], accum=r["accum"], lr=r["lr"],
                            a=r["a"], b=r["gradient"], momentum=r["momentum"],
                            use_nesterov=a["use_nesterov"], **locking)


# The op types production writes as NodeDefs, each with how the tests build
# it: "wrapper" (ops.py's, see _wrapped) or "generated" (the library's
# function, by the argument names in cc/ops/).
# TensorBowResourceApplySma{GradientDescent,Momentum}Outer are left out:
# production never builds them (a resource variable's float32 or float64
# step always takes the fused op with the central update, and the outer
# forms are for those dtypes only).
BUILT_AS = {
    "TensorBowApplySmaGradientDescent": "wrapper",
    "TensorBowResourceApplySmaGradientDescent": "wrapper",
    "TensorBowApplySmaMomentum": "wrapper",
    "TensorBowResourceApplySmaMomentum": "wrapper",
    "TensorBowSmaCorrection": "wrapper",
    "TensorBowResourceSmaCorrection": "wrapper",
    "TensorBowApplySmaCorrection": "wrapper",
    "TensorBowResourceApplySmaCorrection": "wrapper",
    "TensorBowResourceApplySmaGradientDescentWithCentral": "wrapper",
    "TensorBowResourceApplySmaMomentumWithCentral": "wrapper",
    "TensorBowApplyGradientDescentOuter": "wrapper",
    "TensorBowResourceApplyGradientDescentOuter": "wrapper",
    "TensorBowApplyMomentumOuter": "wrapper",
    "TensorBowResourceApplyMomentumOuter": "wrapper",
    "TensorBowMatMul": "wrapper",
    "TensorBowApplySmaGradientDescentOuter": "generated",
    "TensorBowApplySmaMomentumOuter": "generated",
    "TensorBowApplySmaGradientDescentWithCentral": "generated",
    "TensorBowApplySmaMomentumWithCentral": "generated",
    "TensorBowApplySmaGradientDescentOuterWithCentral": "generated",
    "TensorBowResourceApplySmaGradientDescentOuterWithCentral": "generated",
    "TensorBowApplySmaMomentumOuterWithCentral": "generated",
    "TensorBowResourceApplySmaMomentumOuterWithCentral": "generated",
    "TensorBowApplySmaCentralLeader": "generated",
    "TensorBowResourceApplySmaCentralLeader": "generated",
    "TensorBowReplicaVarHandle": "generated",
    "TensorBowReplicaVariable": "generated",
    "TensorBowDeviceVarHandle": "generated",
}


def _role(tensor):
  """What input `tensor` of a TensorBow node in an execution graph is,
  found from the tensor alone."""
  op = tensor.op
  if op.type == "Const":
    return SCALARS[float(tf.make_ndarray(op.get_attr("value")))]
  if op.type == "Placeholder":
    return {"x": "a", "tensorbow/replica": "replica"}[op.name]
  if op.type in ("TensorBowReplicaVarHandle", "TensorBowReplicaVariable"):
    name = op.get_attr("var_name").decode()
    return ("correction" if name.endswith("/correction") else
            "accum" if name.endswith("/Momentum") else "var")
  if op.type in ("VarHandleOp", "VariableV2", "TensorBowDeviceVarHandle"):
    name = op.get_attr("shared_name").decode() or op.name
    return ("central_prev" if name.endswith("/central_prev") else
            "next" if name.endswith("/central_next") else "central")
  if op.type == "TensorBowReplicaHandles":
    return "corrections"
  if op.name.endswith(("/central", "/central_value")):
    return "central"  # its value, read
  if op.name.endswith(">tensorbow_gated") or op.type == "Cast":
    return _role(op.inputs[0])  # the factor gated; a learning rate cast
  return "gradient"


def _roles(node):
  roles = {}
  for tensor in node.inputs:
    role = _role(tensor)
    if role == "corrections":
      roles.setdefault(role, []).append(tensor)
    else:
      assert role not in roles, (node.name, role)
      roles[role] = tensor
  if "corrections" in roles:  # in replica order
    roles["corrections"].sort(key=lambda t: t.value_index)
  return roles


def _user_name(name):
  head, _, rest = name.partition("/group_")
  return (tb_builder.unflat(rest.partition("/")[2]) if head == "tensorbow"
          else name)


def _as_tests_build(node, user_graph, attrs):
  """`node`'s op built as the tests build one, with attrs `attrs`."""
  short = re.sub("^TensorBow(Resource)?", "", node.type)
  if node.type == "TensorBowMatMul":
    # The product of the user's MatMul it stands for: its a and b copied.
    user = user_graph.get_operation_by_name(_user_name(node.name))
    a, b = [next(t for t in node.inputs
                 if _user_name(t.name) == u.name) for u in user.inputs]
    return tb_ops.mat_mul(a, b, transpose_a=user.get_attr("transpose_a"),
                          transpose_b=user.get_attr("transpose_b"))
  roles = _roles(node)
  if BUILT_AS[node.type] == "wrapper":
    return _wrapped(short, roles, attrs)
  # By cc/ops/'s names: the gradient and the replica index as each op
  # calls them; the leader's momentum is the central model's.
  names = {"gradient": ("b" if "Outer" in short else "delta"
                        if "GradientDescent" in short else "grad"),
           "replica": "replica_index" if "WithCentral" in short else
                      "replica",
           "central_momentum": "momentum" if "Leader" in short else
                               "central_momentum"}
  function = getattr(tb_ops.library(),
                     re.sub(r"(?<!^)(?=[A-Z])", "_", node.type).lower())
  taken = inspect.signature(function).parameters
  return function(**{names.get(k, k): v for k, v in roles.items()},
                  **{k: v for k, v in attrs.items() if k in taken})


def _sma(dtype=tf.float32, **options):
  """A model maker: graphs.build's model in `dtype` and SMA's options."""
  def make(optimizer, use_resource):
    return graphs.build(optimizer, use_resource, dtype=dtype), dict(
        dict(replicas=2, alpha=ALPHA, central_momentum=MU), **options)
  return make


def _independent(optimizer, use_resource):
  return graphs.build(optimizer, use_resource), dict(replicas=2,
                                                     algorithm="none")


def _dropout(optimizer, use_resource):
  """A model drawing random numbers: a stream per replica."""
  graph = tf.Graph()
  with graph.as_default():
    tf1.set_random_seed(6)
    x = tf1.placeholder(tf.float32, [None, 3], name="x")
    y = tf1.placeholder(tf.float32, [None, 1], name="y")
    w = tf1.get_variable("w", initializer=graphs.W0,
                         use_resource=use_resource)
    loss = tf.reduce_mean(tf.square(
        tf.matmul(tf.nn.dropout(x, rate=0.5), w) - y))
    train = optimizer().minimize(loss)
    init = tf1.global_variables_initializer()
  model = graphs.Model(graph, x, y, w, None, None, loss, train, init, None)
  return model, dict(replicas=2, alpha=ALPHA, central_momentum=MU)


OPTIMIZERS = {  # name -> (optimizer, whether Nesterov's)
    "sgd": (lambda: tf1.train.GradientDescentOptimizer(LR), False),
    "nesterov": (lambda: tf1.train.MomentumOptimizer(LR, MOMENTUM,
                                                     use_nesterov=True), True),
    "adam": (lambda: tf1.train.AdamOptimizer(LR), False),
}
# name -> (model maker, optimizer, use_resource, TENSORBOW_FAST_KERNELS).
CASES = {
    f"{name}_{optimizer}_{kind}": (make, optimizer, kind == "resource", fast)
    for name, make, optimizers, fast in [
        # The fused ops (with the factors for the weight, without for the
        # bias), and the generic correction with a leader.
        ("sma", _sma(), ["sgd", "nesterov", "adam"], "all"),
        # Not fused with the central update: the step, then a leader.
        ("sma_half", _sma(tf.float16), ["sgd", "nesterov"], "all"),
        ("devices", _sma(replicas=4, config=TWO_CPUS, devices=DEVICES),
         ["sgd", "nesterov"], "all"),
        ("independent", _independent, ["sgd", "nesterov"], "all"),
        # Without the factors' op, whose a would be the dropout's output.
        ("dropout", _dropout, ["sgd"], "0")]
    for optimizer in optimizers for kind in ("resource", "ref")}
_built = {}


def _execution_graph(case):
  """(a copy of `case`'s execution graph after a training run, the user's
  graph, the model's dtype and whether it uses Nesterov momentum)."""
  if case not in _built:
    make, optimizer, use_resource, fast = CASES[case]
    m, options = make(OPTIMIZERS[optimizer][0], use_resource)
    dtype = m.x.dtype
    rng = np.random.RandomState(0)
    feed = {m.x: rng.randn(4, 3).astype(dtype.as_numpy_dtype),
            m.y: rng.randn(4, 1).astype(dtype.as_numpy_dtype)}
    # "all": every substitute, whatever this machine's timings.
    with pytest.MonkeyPatch.context() as patch:
      patch.setenv("TENSORBOW_FAST_KERNELS", fast)
      with tb.TensorBowSession(graph=m.graph, **options) as sess:
        sess.run(m.init)
        sess.run(m.train, feed)
        graph_def = sess.execution_graph.as_graph_def()
    graph = tf.Graph()
    with graph.as_default():
      tf.graph_util.import_graph_def(graph_def, name="")
    _built[case] = graph, m.graph, dtype, OPTIMIZERS[optimizer][1]
  return _built[case]


@pytest.mark.parametrize("case", sorted(CASES))
def test_production_nodes_are_the_ops_the_kernel_tests_build(case):
  graph, user_graph, dtype, nesterov = _execution_graph(case)
  # What the copies take over from the user's apply op.
  model = {"T": dtype, "use_locking": False, "use_nesterov": nesterov}
  checked = 0
  for node in graph.get_operations():
    if node.type not in BUILT_AS:
      assert node.type in GENERATED or not node.type.startswith("TensorBow"), (
          f"{node.type} is built as a NodeDef: add it to BUILT_AS")
      continue
    attrs = {a: node.get_attr(a) for a in node.node_def.attr}
    attrs.update({a: v for a, v in model.items() if a in attrs})
    with graph.as_default():
      built = _as_tests_build(node, user_graph, attrs)
    built = built if isinstance(built, tf.Operation) else built.op
    data = [i for i in node.node_def.input if not i.startswith("^")]
    assert list(built.node_def.input) == data, node.name
    # Less the colocation TensorFlow gives an op taking a reference.
    assert ({k: v for k, v in built.node_def.attr.items()
             if k != "_class"} == dict(node.node_def.attr)), node.name
    checked += 1
  assert checked


def test_every_op_type_production_builds_is_checked():
  seen = set()
  for case in CASES:
    seen |= set(op.type for op in _execution_graph(case)[0].get_operations())
  assert set(BUILT_AS) <= seen, sorted(set(BUILT_AS) - seen)


# ---- op_nodes itself -------------------------------------------------------


def _momentum_args(**changes):
  args = dict(var="w", accum="w/Momentum", correction="c", central="z",
              alpha="alpha", lr="lr", grad="g", momentum="m", T="float32")
  args.update(changes)
  return {k: v for k, v in args.items() if v is not None}


@pytest.mark.mode_independent
def test_inputs_go_in_the_ops_order_whatever_the_order_given():
  node = op_nodes.node_def(
      "TensorBowResourceApplySmaMomentum", "step", device="/cpu:0",
      control=["before"], **dict(reversed(_momentum_args().items())),
      use_nesterov=True)
  assert list(node.input) == ["w", "w/Momentum", "c", "z", "alpha", "lr",
                              "g", "m", "^before"]
  assert str(node.attr["T"]).strip() == "type: DT_FLOAT"
  assert node.attr["use_nesterov"].b
  assert "use_locking" not in node.attr  # its default
  assert node.device == "/cpu:0"


@pytest.mark.mode_independent
def test_a_misspelt_argument_is_refused():
  with pytest.raises(ValueError, match=(
      r"TensorBowResourceApplySmaMomentum has no input or attr 'acum'; its "
      r"inputs are var, accum, correction, central, alpha, lr, grad, "
      r"momentum and its attrs T, use_locking, use_nesterov")):
    op_nodes.node_def("TensorBowResourceApplySmaMomentum", "step",
                      **_momentum_args(accum=None, acum="w/Momentum"))


@pytest.mark.mode_independent
def test_a_missing_input_or_attr_is_refused():
  with pytest.raises(ValueError, match=r"TensorBowResourceApplySmaMomentum "
                     r"'step' needs input\(s\) accum, momentum"):
    op_nodes.node_def("TensorBowResourceApplySmaMomentum", "step",
                      **_momentum_args(accum=None, momentum=None))
  with pytest.raises(ValueError, match=r"'step' needs attr T \(type\)"):
    op_nodes.node_def("TensorBowResourceApplySmaMomentum", "step",
                      **_momentum_args(T=None))


def _leader(**changes):
  args = dict(central="z", central_prev="zp",
              corrections=["c:0", "c:1", "c:2"], momentum="m", T="float64",
              barrier="b", control=["step"])
  args.update(changes)
  return op_nodes.node_def("TensorBowResourceApplySmaCentralLeader",
                           "leader", **args)


@pytest.mark.mode_independent
def test_a_list_input_sets_its_length_attr():
  node = _leader()
  assert list(node.input) == ["z", "zp", "c:0", "c:1", "c:2", "m", "^step"]
  assert node.attr["N"].i == 3
  assert node.attr["barrier"].s == b"b"
  assert op_nodes.named_inputs(node) == dict(
      central="z", central_prev="zp", corrections=["c:0", "c:1", "c:2"],
      momentum="m")
  assert op_nodes.control_names(node) == ["step"]
  with pytest.raises(ValueError, match="input corrections takes a list of "
                     "tensor names, got 'c:0'"):
    _leader(corrections="c:0")
  with pytest.raises(ValueError, match="input momentum takes one tensor "
                     "name, got"):
    _leader(momentum=["m"])
  with pytest.raises(ValueError, match="N=2 but its list input has 3"):
    _leader(N=2)


@pytest.mark.mode_independent
def test_only_tensorbows_ops_and_plain_control_names_are_built():
  with pytest.raises(ValueError, match="'ApplyMomentum' is not an op of "
                     "TensorBow's library"):
    op_nodes.node_def("ApplyMomentum", "x", var="w")
  with pytest.raises(ValueError, match=r"give control input '\^a' without "
                     r"its '\^'"):
    op_nodes.node_def("TensorBowResourceApplySmaMomentum", "step",
                      control=["^a"], **_momentum_args())
  with pytest.raises(TypeError, match=r"attr use_nesterov \(bool\) cannot "
                     "be set from 'yes'"):
    op_nodes.node_def("TensorBowResourceApplySmaMomentum", "step",
                      use_nesterov="yes", **_momentum_args())


def test_tensorflows_ops_inputs_are_named_by_their_definition():
  node = tf1.NodeDef(name="apply", op="ResourceApplyGradientDescent",
                     input=["w", "lr", "g", "^gate"])
  assert op_nodes.input_names(node) == ["var", "alpha", "delta"]
  assert op_nodes.named_inputs(node) == dict(var="w", alpha="lr", delta="g")
  with pytest.raises(ValueError, match="no op 'NoSuchOp' is registered"):
    op_nodes.input_names(tf1.NodeDef(name="n", op="NoSuchOp"))
