"""The denoising autoencoder of the paper's tabular "AE" representation (appendix "Tabular
Representation Details"): encoder 128-64-32-16 to an 8-dim bottleneck, the decoder mirrored,
dropout on the input as the corruption, trained with NeurCAM's optimiser settings. Pure math."""
from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

HIDDEN = (128, 64, 32, 16)
BOTTLENECK = 8
DROPOUT = 0.1


def _mlp(dims: tuple[int, ...]) -> nn.Sequential:
    layers = []
    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:], strict=False)):
        layers.append(nn.Linear(a, b))
        if i < len(dims) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class DenoisingAutoencoder(nn.Module):
    """The paper's denoising autoencoder (input dropout, a mirrored MLP); its bottleneck is
    the embedding the clustering loss uses with ``representation: {kind: dae}``."""
    def __init__(self, n_features: int, hidden: tuple[int, ...] = HIDDEN, bottleneck: int = BOTTLENECK,
                 dropout: float = DROPOUT, seed: int = 0):
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.encoder = _mlp((n_features, *hidden, bottleneck))
            self.decoder = _mlp((bottleneck, *reversed(hidden), n_features))
        self.corrupt = nn.Dropout(dropout)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """The bottleneck (the embedding) of ``x``."""
        return self.encoder(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The training loss: mean squared reconstruction error of the clean rows from their
        corrupted copies (``forward`` so that a DDP wrapper synchronises its gradients)."""
        return nn.functional.mse_loss(self.decoder(self.encoder(self.corrupt(x))), x)


def optimizer(model: nn.Module, lr: float, lr_patience: int):
    """NeurCAM's settings: Adam, the learning rate halved after ``lr_patience`` flat epochs."""
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    return opt, torch.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=0.5, patience=lr_patience)


def train_epoch(model: nn.Module, opt: torch.optim.Optimizer, batches: Iterable[torch.Tensor]) -> torch.Tensor:
    """One pass of the optimiser; ``model`` may be a DDP wrapper. Returns (loss sum, rows) as one
    float64 tensor, kept on the device until read (what a data-parallel driver all-reduces)."""
    model.train()
    sums = None
    for x in batches:
        loss = model(x)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step = torch.stack([loss.detach().double() * len(x), torch.tensor(float(len(x)), dtype=torch.float64,
                                                                          device=x.device)])
        sums = step if sums is None else sums + step
    return sums if sums is not None else torch.zeros(2, dtype=torch.float64)
