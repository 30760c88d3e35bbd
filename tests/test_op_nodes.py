"""One definition of each TensorBow op's inputs (tensorbow/op_nodes.py).

A TensorBow op's NodeDef is built from its inputs and attrs given by their
names in cc/ops/, in the op's order whatever the order given; a name the
op does not have, or a missing one, is refused.
"""
import pytest
import tensorflow as tf

from tensorbow import op_nodes

tf1 = tf.compat.v1


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
