import torch

from {{ cookiecutter.package_name }}.network import ConvNet


def test_forward_maps_images_to_one_logit_per_class():
    network = ConvNet(image_shape=(1, 8, 8), num_classes=10)
    logits = network(torch.rand(5, 1, 8, 8))
    assert logits.shape == (5, 10)
    assert torch.isfinite(logits).all()


def test_other_image_shapes_work():
    network = ConvNet(image_shape=(3, 16, 12), num_classes=4, width=8)
    assert network(torch.rand(2, 3, 16, 12)).shape == (2, 4)


def test_every_parameter_gets_a_gradient():
    network = ConvNet(image_shape=(1, 8, 8), num_classes=10)
    network(torch.rand(4, 1, 8, 8)).sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in network.parameters())
