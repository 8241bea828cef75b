"""MNIST as jax's examples/datasets.py gives it, without the download:
synthetic images of the same shapes and dtypes (float32 rows of 784 pixels
on unit scale, one-hot float32 labels), fewer of them, the same every run."""

import numpy as np

#: Examples per set: not a multiple of the examples' batch sizes, as MNIST's
#: 60000 is not, so the last batch of an epoch is smaller.
TRAIN, TEST = 300, 100


def _one_hot(x, k, dtype=np.float32):
  """Create a one-hot encoding of x of size k."""
  return np.array(x[:, None] == np.arange(k), dtype)


def mnist_raw():
  """Synthetic stand-ins for the four MNIST arrays, as uint8 pixels and labels."""
  rng = np.random.RandomState(42)
  train_images = rng.randint(0, 256, size=(TRAIN, 28, 28)).astype(np.uint8)
  train_labels = rng.randint(0, 10, size=TRAIN).astype(np.uint8)
  test_images = rng.randint(0, 256, size=(TEST, 28, 28)).astype(np.uint8)
  test_labels = rng.randint(0, 10, size=TEST).astype(np.uint8)
  return train_images, train_labels, test_images, test_labels


def mnist(permute_train=False):
  """Parse and process MNIST data to unit scale and one-hot labels."""
  train_images, train_labels, test_images, test_labels = mnist_raw()

  train_images = train_images.reshape((TRAIN, -1)) / np.float32(255.)
  test_images = test_images.reshape((TEST, -1)) / np.float32(255.)
  train_labels = _one_hot(train_labels, 10)
  test_labels = _one_hot(test_labels, 10)

  if permute_train:
    perm = np.random.RandomState(0).permutation(train_images.shape[0])
    train_images = train_images[perm]
    train_labels = train_labels[perm]

  return train_images, train_labels, test_images, test_labels
