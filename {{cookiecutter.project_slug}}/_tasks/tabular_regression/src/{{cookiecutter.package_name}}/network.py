"""The neural network: a plain PyTorch module with no training logic (`model.py` has that).

Swap in your own architecture here: any module that maps a batch of feature rows to one value each.
"""

import itertools
from collections.abc import Sequence

from torch import Tensor, nn


class MLP(nn.Module):
    """Fully connected layers with ReLU and dropout: sized for small tables (ten features, a few
    hundred rows), it fits the diabetes data in seconds on a CPU."""

    def __init__(self, num_features: int, hidden_sizes: Sequence[int] = (32,), dropout: float = 0.2) -> None:
        super().__init__()
        if num_features < 1 or any(size < 1 for size in hidden_sizes):  # settings checked where taken
            raise ValueError(
                f"--model.network.hidden_sizes must be 1 or more each, got {list(hidden_sizes)} "
                f"(and the data {num_features} feature(s))."
            )
        if not 0 <= dropout < 1:
            raise ValueError(f"--model.network.dropout must lie in [0, 1), got {dropout}.")
        layers: list[nn.Module] = []
        sizes = [num_features, *hidden_sizes]
        for size_in, size_out in itertools.pairwise(sizes):
            layers += [nn.Linear(size_in, size_out), nn.ReLU(), nn.Dropout(dropout)]
        self.layers = nn.Sequential(*layers, nn.Linear(sizes[-1], 1))

    def forward(self, features: Tensor) -> Tensor:
        """Map rows of shape (batch, features) to one value each, shape (batch,)."""
        return self.layers(features).squeeze(-1)
