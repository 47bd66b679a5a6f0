import pytest
import torch

from {{ cookiecutter.package_name }}.network import MLP


def test_forward_maps_rows_to_one_value_each():
    values = MLP(num_features=10)(torch.randn(5, 10))
    assert values.shape == (5,) and torch.isfinite(values).all()


def test_other_widths_and_depths_work():
    assert MLP(num_features=3, hidden_sizes=(16, 8, 4))(torch.randn(2, 3)).shape == (2,)
    assert MLP(num_features=3, hidden_sizes=())(torch.randn(2, 3)).shape == (2,)  # linear regression


def test_every_parameter_gets_a_gradient():
    network = MLP(num_features=10, dropout=0.0)
    network(torch.randn(4, 10)).sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in network.parameters())


@pytest.mark.parametrize(
    ("settings", "flag"), [({"hidden_sizes": (0,)}, "hidden_sizes"), ({"dropout": 1.0}, "dropout")]
)
def test_bad_settings_are_refused_naming_the_flag(settings, flag):
    with pytest.raises(ValueError, match=rf"--model\.network\.{flag}"):
        MLP(num_features=10, **settings)
