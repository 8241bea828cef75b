"""Small synthetic data sets for the programs beside this file, the same on
every run: each is drawn from a NumPy generator seeded with a fixed number,
so python, ``ppy record`` and ``ppy run`` all train on the same arrays."""

import numpy as np


def _one_hot(labels, classes):
    return np.eye(classes, dtype=np.float32)[labels]


def blobs(count, dims=8, classes=3, seed=0):
    """Points scattered around one centre per class, with one-hot labels.

    The centres come from their own seed, so a training set and a test set
    drawn with different seeds share them."""
    centres = np.random.RandomState(1234).normal(scale=2.0, size=(classes, dims))
    rng = np.random.RandomState(seed)
    labels = rng.randint(0, classes, size=count)
    points = centres[labels] + rng.normal(size=(count, dims))
    return points.astype(np.float32), _one_hot(labels, classes)


def blocks(count, side=4, seed=0):
    """Tiny black-and-white images: a 2x2 white square somewhere on a black
    ground, a few pixels flipped, flattened to rows of ``side * side`` 0/1."""
    rng = np.random.RandomState(seed)
    images = np.zeros((count, side, side))
    corners = rng.randint(0, side - 1, size=(count, 2))
    for image, (row, col) in zip(images, corners):
        image[row : row + 2, col : col + 2] = 1.0
    flipped = rng.uniform(size=images.shape) < 0.05
    images = np.where(flipped, 1.0 - images, images)
    return images.reshape(count, side * side).astype(np.float32)


def decay(count, seed=0):
    """Noisy samples of ``2.5 * exp(-1.3 t) + 0.4`` on ``t`` in [0, 3]."""
    rng = np.random.RandomState(seed)
    t = np.linspace(0.0, 3.0, count)
    y = 2.5 * np.exp(-1.3 * t) + 0.4 + rng.normal(scale=0.05, size=count)
    return t.astype(np.float32), y.astype(np.float32)


def wave(count, seed=0):
    """Noisy samples of a sine wave at sorted points of [-3, 3]."""
    rng = np.random.RandomState(seed)
    x = np.sort(rng.uniform(-3.0, 3.0, size=count))
    y = np.sin(1.5 * x) + rng.normal(scale=0.1, size=count)
    return x.astype(np.float32), y.astype(np.float32)
