"""Factories for `autoshard import torch tests/data/torch_models.py:<name>` (tests only).

Each returns (module, example_inputs) on the meta device: the importer never needs weights.
"""

import torch
from torch import nn
from torch.nn import functional as F


class MLPWithLoss(nn.Module):
    """Two linear layers, tanh GELU, mean cross-entropy against integer targets."""

    def __init__(self, width: int = 16, hidden: int = 32, classes: int = 8) -> None:
        super().__init__()
        self.fc1 = nn.Linear(width, hidden)
        self.fc2 = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = self.fc2(F.gelu(self.fc1(x), approximate="tanh"))
        return F.cross_entropy(logits, targets)


class RunningSum(nn.Module):
    """Uses torch.cumsum, which has no registered kind (imports as an opaque op)."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(torch.cumsum(x, dim=1)) + torch.cumsum(x, dim=0)


def make():
    with torch.device("meta"):
        model = MLPWithLoss()
        x = torch.empty(4, 16)
        targets = torch.zeros(4, dtype=torch.long)
    return model, (x, targets)


def make_unmapped():
    with torch.device("meta"):
        return RunningSum(), (torch.empty(4, 8),)


def make_broken():
    with torch.device("meta"):
        return MLPWithLoss(), (torch.empty(4, 5), torch.zeros(4, dtype=torch.long))


NOT_CALLABLE = 3
