"""Real datasets, read from files that are already on the machine — never downloaded.

- digits: scikit-learn's 8x8 handwritten digits, bundled with flowlite (the offline default);
- MNIST / Fashion-MNIST: the standard IDX files (raw or .gz) in a directory the user names;
- CIFAR-10: the standard binary batches (cifar-10-batches-bin);
- text: a character-level corpus from any file, by default the Python standard library's
  own sources, which exist wherever Python does.

A file that is missing or malformed raises DatasetError (DatasetNotFoundError when missing)
naming the file expected and what was wrong, so ``train.py`` can print one clear line.
"""

from __future__ import annotations

import functools
import gzip
import os
import sysconfig
import zlib
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence, Union

import numpy as np

from .dataset import Dataset

__all__ = [
    "DatasetError",
    "DatasetNotFoundError",
    "load_digits",
    "digits_split",
    "read_idx",
    "load_mnist",
    "load_cifar10",
    "stdlib_text",
    "CharCorpus",
    "load_text",
    "LMWindowDataset",
    "random_windows",
]

PathLike = Union[str, os.PathLike]


class DatasetError(ValueError):
    """A dataset file exists but is not what it should be (or cannot be used)."""


class DatasetNotFoundError(DatasetError, FileNotFoundError):
    """A dataset file or directory is not where it was expected."""


def _read_bytes(path: Path) -> bytes:
    """Read a file, transparently gunzipping ``*.gz``; corrupt archives become DatasetError."""
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as f:
                return f.read()
        return path.read_bytes()
    except (OSError, EOFError, zlib.error) as exc:
        if isinstance(exc, FileNotFoundError):
            raise DatasetNotFoundError(f"{path}: file not found") from None
        raise DatasetError(f"{path}: cannot read ({type(exc).__name__}: {exc})") from None


def _existing_dir(data_dir: PathLike, what: str) -> Path:
    path = Path(data_dir).expanduser()
    if not path.is_dir():
        state = "is not a directory" if path.exists() else "does not exist"
        raise DatasetNotFoundError(f"{what} data directory {path} {state}")
    return path


# ---------------------------------------------------------------- digits

DIGITS_PATH = Path(__file__).with_name("digits.csv.gz")


@functools.lru_cache(maxsize=1)
def _digits_table() -> np.ndarray:
    """Parse the bundled CSV once per process; callers get copies, so the cache stays intact."""
    try:
        with gzip.open(DIGITS_PATH, "rt") as f:
            table = np.loadtxt(f, delimiter=",", dtype=np.float32, ndmin=2)
    except FileNotFoundError:
        raise DatasetNotFoundError(
            f"bundled digits file {DIGITS_PATH} is missing; reinstall flowlite"
        ) from None
    except (OSError, EOFError, ValueError, zlib.error) as exc:
        raise DatasetError(f"{DIGITS_PATH}: cannot parse the digits CSV ({exc})") from None
    if table.shape[1] != 65:
        raise DatasetError(
            f"{DIGITS_PATH}: expected 65 columns per row (64 pixels + label), got {table.shape[1]}"
        )
    pixels, labels = table[:, :64], table[:, 64]
    if pixels.min() < 0 or pixels.max() > 16 or not np.isin(labels, np.arange(10)).all():
        raise DatasetError(f"{DIGITS_PATH}: pixels must lie in [0, 16] and labels in 0..9")
    return table


def load_digits() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's 1,797 8x8 handwritten digits, bundled so training works offline.

    Returns ``(images, labels)``: float32 ``(1797, 1, 8, 8)`` in [0, 1] (pixels are 0..16),
    int32 ``(1797,)`` in 0..9.
    """
    table = _digits_table()
    images = (table[:, :64] / np.float32(16.0)).reshape(-1, 1, 8, 8).astype(np.float32)
    labels = table[:, 64].astype(np.int32)
    return images, labels


def digits_split(
    test_fraction: float = 0.2, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A fixed random train/test split of the digits: ``(train_x, train_y, test_x, test_y)``.

    The split depends only on ``seed``, so accuracies reported in the README are reproducible.
    """
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"digits_split: test_fraction must lie strictly between 0 and 1, got {test_fraction}")
    images, labels = load_digits()
    order = np.random.default_rng(seed).permutation(len(labels))
    n_test = int(round(len(labels) * test_fraction))
    n_test = min(max(n_test, 1), len(labels) - 1)
    test, train = order[:n_test], order[n_test:]
    return images[train], labels[train], images[test], labels[test]


# ---------------------------------------------------------------- MNIST / Fashion-MNIST (IDX)

IDX_IMAGES_MAGIC = 2051  # 0x00000803: unsigned bytes, 3 dimensions
IDX_LABELS_MAGIC = 2049  # 0x00000801: unsigned bytes, 1 dimension

_MNIST_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
# Where torchvision keeps the same files, so an existing torchvision download is found too.
_TORCHVISION_DIRS = {"mnist": "MNIST/raw", "fashion-mnist": "FashionMNIST/raw"}
_KIND_NAMES = {"mnist": "MNIST", "fashion-mnist": "Fashion-MNIST"}


def read_idx(path: PathLike, expected_magic: Optional[int] = None) -> np.ndarray:
    """Read one IDX file of unsigned bytes (raw or ``.gz``) into a uint8 array.

    The header is big-endian: a magic number ``0x0000 08 <ndim>`` then ``ndim`` uint32 sizes.
    The file size must match the sizes exactly: a truncated download is an error, not a
    silently shorter dataset.
    """
    path = Path(path)
    raw = _read_bytes(path)
    if len(raw) < 4:
        raise DatasetError(f"{path}: not an IDX file (only {len(raw)} bytes, no header)")
    magic = int.from_bytes(raw[:4], "big")
    if expected_magic is not None and magic != expected_magic:
        raise DatasetError(f"{path}: bad IDX magic number {magic} (expected {expected_magic})")
    if magic >> 8 != 0x08:
        raise DatasetError(
            f"{path}: IDX magic number {magic:#010x} does not describe unsigned bytes (0x000008nn)"
        )
    ndim = magic & 0xFF
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DatasetError(f"{path}: truncated IDX header ({len(raw)} bytes, need {header})")
    dims = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    expected = header + int(np.prod(dims, dtype=np.int64))
    if len(raw) != expected:
        raise DatasetError(
            f"{path}: file has {len(raw)} bytes but its header (shape {dims}) needs {expected}"
            + (" — truncated?" if len(raw) < expected else " — trailing garbage?")
        )
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(dims)


def _find_file(directories: Sequence[Path], name: str, what: str) -> Path:
    """The first of ``name`` or ``name.gz`` in ``directories``; raw wins over gzip."""
    for directory in directories:
        for candidate in (directory / name, directory / (name + ".gz")):
            if candidate.is_file():
                return candidate
    where = " or ".join(str(d) for d in directories)
    raise DatasetNotFoundError(f"{what}: expected {name} or {name}.gz in {where}")


def load_mnist(
    data_dir: PathLike, split: str = "train", kind: str = "mnist"
) -> tuple[np.ndarray, np.ndarray]:
    """MNIST or Fashion-MNIST from the standard IDX files in ``data_dir`` (raw or ``.gz``).

    Both datasets use the same file names (``train-images-idx3-ubyte``, ...); ``kind`` only
    selects the torchvision sub-folder also searched and the name used in errors.
    Returns float32 images ``(N, 1, 28, 28)`` in [0, 1] and int32 labels ``(N,)``.
    """
    if split not in _MNIST_FILES:
        raise ValueError(f"load_mnist: split must be 'train' or 'test', got {split!r}")
    if kind not in _KIND_NAMES:
        raise ValueError(f"load_mnist: kind must be 'mnist' or 'fashion-mnist', got {kind!r}")
    name = _KIND_NAMES[kind]
    root = _existing_dir(data_dir, name)
    directories = [root, root / _TORCHVISION_DIRS[kind]]
    image_name, label_name = _MNIST_FILES[split]
    image_path = _find_file(directories, image_name, f"{name} {split} images")
    label_path = _find_file(directories, label_name, f"{name} {split} labels")

    images = read_idx(image_path, IDX_IMAGES_MAGIC)
    labels = read_idx(label_path, IDX_LABELS_MAGIC)
    if images.shape[1:] != (28, 28):
        raise DatasetError(f"{image_path}: images are {images.shape[1:]} pixels, expected (28, 28)")
    if len(images) != len(labels):
        raise DatasetError(
            f"{image_path} holds {len(images)} images but {label_path} holds {len(labels)} labels"
        )
    if labels.size and labels.max() > 9:
        raise DatasetError(f"{label_path}: label {int(labels.max())} is out of range 0..9")
    return _scale_images(images).reshape(-1, 1, 28, 28), labels.astype(np.int32)


def _scale_images(pixels: np.ndarray) -> np.ndarray:
    """uint8 pixels to float32 in [0, 1], in place after the one unavoidable copy."""
    images = pixels.astype(np.float32)
    images *= np.float32(1.0 / 255.0)
    return images


# ---------------------------------------------------------------- CIFAR-10 (binary version)

CIFAR_DIRNAME = "cifar-10-batches-bin"
CIFAR_RECORD = 1 + 3 * 32 * 32  # one label byte, then 1024 red, 1024 green, 1024 blue bytes
_CIFAR_FILES = {
    "train": tuple(f"data_batch_{i}.bin" for i in range(1, 6)),
    "test": ("test_batch.bin",),
}


def _cifar_dir(data_dir: PathLike) -> Path:
    """Accept the batches folder itself or the folder that contains it."""
    root = _existing_dir(data_dir, "CIFAR-10")
    names = {n for files in _CIFAR_FILES.values() for n in files}
    if any((root / n).is_file() for n in names):
        return root
    if (root / CIFAR_DIRNAME).is_dir():
        return root / CIFAR_DIRNAME
    hint = ""
    if (root / "cifar-10-binary.tar.gz").is_file():
        hint = f"; extract it first: tar xzf {root / 'cifar-10-binary.tar.gz'} -C {root}"
    raise DatasetNotFoundError(
        f"CIFAR-10: expected {CIFAR_DIRNAME}/ (with data_batch_1.bin ... data_batch_5.bin, "
        f"test_batch.bin) in {root}, or those .bin files directly in it{hint}"
    )


def _read_cifar_batch(path: Path) -> np.ndarray:
    raw = _read_bytes(path)
    if len(raw) == 0 or len(raw) % CIFAR_RECORD:
        raise DatasetError(
            f"{path}: size {len(raw)} bytes is not a positive multiple of the "
            f"{CIFAR_RECORD}-byte CIFAR-10 record (1 label byte + 3072 pixel bytes)"
        )
    records = np.frombuffer(raw, dtype=np.uint8).reshape(-1, CIFAR_RECORD)
    if records[:, 0].max() > 9:
        raise DatasetError(f"{path}: label {int(records[:, 0].max())} is out of range 0..9 — not CIFAR-10?")
    return records


def load_cifar10(data_dir: PathLike, split: str = "train") -> tuple[np.ndarray, np.ndarray]:
    """CIFAR-10 from the standard binary batches (``cifar-10-batches-bin``).

    ``data_dir`` may be the batches folder or its parent. Returns float32 images
    ``(N, 3, 32, 32)`` in [0, 1] (channel-first, as stored) and int32 labels ``(N,)``.
    """
    if split not in _CIFAR_FILES:
        raise ValueError(f"load_cifar10: split must be 'train' or 'test', got {split!r}")
    folder = _cifar_dir(data_dir)
    missing = [n for n in _CIFAR_FILES[split] if not (folder / n).is_file()]
    if missing:
        raise DatasetNotFoundError(f"CIFAR-10 {split}: missing {', '.join(missing)} in {folder}")
    records = np.concatenate([_read_cifar_batch(folder / n) for n in _CIFAR_FILES[split]])
    images = _scale_images(records[:, 1:]).reshape(-1, 3, 32, 32)
    return images, records[:, 0].astype(np.int32)


# ---------------------------------------------------------------- character-level text

_SKIPPED_DIRS = frozenset({"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"})


def _stdlib_sources(stdlib: Path) -> Iterator[Path]:
    """The standard library's .py files in a fixed order (sorted walk, tests excluded)."""
    for directory, subdirs, files in os.walk(stdlib):
        subdirs[:] = sorted(d for d in subdirs if d not in _SKIPPED_DIRS)
        for name in sorted(files):
            if name.endswith(".py"):
                yield Path(directory) / name


def stdlib_text(max_chars: Optional[int] = 2_000_000) -> str:
    """The Python standard library's own sources, concatenated: real text wherever Python is.

    Files are read in sorted order and the result is cut at ``max_chars``, so the corpus is
    the same on every run on a machine (it varies only with the Python version).
    """
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    parts: list[str] = []
    total = 0
    for path in _stdlib_sources(stdlib):
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue  # an unreadable file just is not part of the corpus
        parts.append(text)
        total += len(text)
        if max_chars is not None and total >= max_chars:
            break
    if not parts:
        raise DatasetNotFoundError(
            f"no Python sources (.py) found under the standard library {stdlib}; "
            "pass a text file instead"
        )
    text = "".join(parts)
    return text if max_chars is None else text[:max_chars]


def _codepoints(text: str) -> np.ndarray:
    """Unicode code points of ``text`` as a uint32 array, without a Python-level loop."""
    return np.frombuffer(text.encode("utf-32-le", errors="surrogatepass"), dtype="<u4")


class CharCorpus:
    """A character-level corpus: the text as int32 ids plus the vocabulary to map back.

    By default the vocabulary is the sorted set of characters in the text (ids 0..V-1).
    With ``ascii_only=True`` the vocabulary is fixed to 128 ids, so a model's embedding size
    does not depend on the corpus: ASCII characters map to their own code, any other
    character to ``REPLACEMENT_ID`` (26, ASCII's SUB "substitute" control), which decodes as
    U+FFFD. ``train`` is the first ``1 - val_fraction`` of ``data`` and ``val`` the rest.
    """

    ASCII_SIZE = 128
    REPLACEMENT_ID = 26  # ASCII SUB, the control code meant to stand in for invalid characters
    REPLACEMENT_CHAR = "\ufffd"

    def __init__(self, text: str, ascii_only: bool = False, val_fraction: float = 0.1, name: str = "text"):
        if not 0.0 < val_fraction < 1.0:
            raise ValueError(f"CharCorpus: val_fraction must lie strictly between 0 and 1, got {val_fraction}")
        if len(text) < 2:
            raise DatasetError(f"{name}: the corpus needs at least 2 characters, got {len(text)}")
        self.name = name
        self.ascii_only = bool(ascii_only)
        codes = _codepoints(text)
        if self.ascii_only:
            self._codes = np.arange(self.ASCII_SIZE, dtype=np.uint32)
            self.data = np.where(codes < self.ASCII_SIZE, codes, self.REPLACEMENT_ID).astype(np.int32)
            self.itos = [chr(i) for i in range(self.ASCII_SIZE)]
            self.itos[self.REPLACEMENT_ID] = self.REPLACEMENT_CHAR
        else:
            self._codes, ids = np.unique(codes, return_inverse=True)
            self.data = ids.astype(np.int32).reshape(-1)
            self.itos = [chr(c) for c in self._codes]
        self.vocab = list(self.itos)
        self.stoi = {ch: i for i, ch in enumerate(self.itos)}
        n_val = min(max(int(round(len(self.data) * val_fraction)), 1), len(self.data) - 1)
        self.train = self.data[: len(self.data) - n_val]
        self.val = self.data[len(self.data) - n_val :]

    @property
    def vocab_size(self) -> int:
        return len(self.itos)

    def __len__(self) -> int:
        return len(self.data)

    def encode(self, text: str) -> np.ndarray:
        """Map ``text`` to int32 ids. In ascii_only mode unknown characters become
        REPLACEMENT_ID; otherwise a character outside the vocabulary is a ValueError."""
        codes = _codepoints(text)
        if self.ascii_only:
            return np.where(codes < self.ASCII_SIZE, codes, self.REPLACEMENT_ID).astype(np.int32)
        ids = np.searchsorted(self._codes, codes)
        known = (ids < len(self._codes)) & (self._codes[np.minimum(ids, len(self._codes) - 1)] == codes)
        if not known.all():
            bad = chr(int(codes[~known][0]))
            raise ValueError(f"character {bad!r} (U+{ord(bad):04X}) is not in the vocabulary of {self.name}")
        return ids.astype(np.int32)

    def decode(self, ids: Any) -> str:
        """Map ids (any int sequence or array) back to text."""
        ids = np.asarray(ids).reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= self.vocab_size):
            raise ValueError(f"decode: ids must lie in 0..{self.vocab_size - 1}, got {int(ids.min())}..{int(ids.max())}")
        return "".join(self.itos[i] for i in ids.tolist())

    def unigram_entropy(self, split: str = "all") -> float:
        """Entropy (nats) of the character distribution: the loss of a model that learnt only
        character frequencies, so a language model must get its loss clearly below this."""
        ids = {"all": self.data, "train": self.train, "val": self.val}.get(split)
        if ids is None:
            raise ValueError(f"unigram_entropy: split must be 'all', 'train' or 'val', got {split!r}")
        counts = np.bincount(ids, minlength=self.vocab_size)
        p = counts[counts > 0] / ids.size
        return float(-(p * np.log(p)).sum())

    def __repr__(self) -> str:
        return (
            f"CharCorpus({self.name}: {len(self.data)} chars, vocab {self.vocab_size}, "
            f"train {len(self.train)}, val {len(self.val)})"
        )


def load_text(
    path: Optional[PathLike] = None,
    max_chars: Optional[int] = 2_000_000,
    ascii_only: bool = False,
    val_fraction: float = 0.1,
) -> CharCorpus:
    """A CharCorpus from a text file (UTF-8, undecodable bytes replaced), capped at
    ``max_chars`` characters (None: whole file). Without ``path``: the standard library's
    sources (:func:`stdlib_text`)."""
    if max_chars is not None and max_chars < 2:
        raise ValueError(f"load_text: max_chars must be at least 2 (or None), got {max_chars}")
    if path is None:
        return CharCorpus(stdlib_text(max_chars), ascii_only, val_fraction, name="Python standard library")
    path = Path(path).expanduser()
    if not path.is_file():
        state = "is a directory, not a text file" if path.is_dir() else "not found"
        raise DatasetNotFoundError(f"text corpus {path}: {state}")
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read() if max_chars is None else f.read(max_chars)
    except OSError as exc:
        raise DatasetError(f"text corpus {path}: cannot read ({exc})") from None
    if len(text) < 2:
        raise DatasetError(f"text corpus {path}: has {len(text)} characters, need at least 2")
    return CharCorpus(text, ascii_only, val_fraction, name=str(path))


class LMWindowDataset(Dataset):
    """Every length-``context`` window of a token stream, as ``(x, y)`` with ``y`` = ``x``
    shifted by one: the next-token targets of a language model."""

    def __init__(self, data: Any, context: int):
        self.data = np.asarray(data, dtype=np.int32).reshape(-1)
        if not isinstance(context, (int, np.integer)) or context < 1:
            raise ValueError(f"LMWindowDataset: context must be a positive integer, got {context!r}")
        if len(self.data) <= context:
            raise ValueError(
                f"LMWindowDataset: need more than context={context} tokens to form one window, "
                f"got {len(self.data)}"
            )
        self.context = int(context)
        self._offsets = np.arange(self.context + 1)

    def __len__(self) -> int:
        return len(self.data) - self.context

    def __getitem__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        n = len(self)
        if not -n <= index < n:
            raise IndexError(f"LMWindowDataset: index {index} out of range for {n} windows")
        start = index % n
        window = self.data[start : start + self.context + 1]
        return window[:-1], window[1:]

    def get_batch(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """All windows of a batch with one gather (the DataLoader's fast path)."""
        windows = self.data[(np.asarray(indices) % len(self))[:, None] + self._offsets]
        return windows[:, :-1], windows[:, 1:]


def random_windows(
    data: Any, batch_size: int, context: int, rng: Union[np.random.Generator, int, None]
) -> tuple[np.ndarray, np.ndarray]:
    """A batch of ``batch_size`` windows at uniformly random offsets: ``(x, y)`` int32
    ``(batch_size, context)``. The usual way to feed a char LM: no epoch bookkeeping, and
    one gather per batch. ``rng`` is a numpy Generator (or a seed)."""
    data = np.asarray(data)
    if data.ndim != 1:
        raise ValueError(f"random_windows: data must be 1-D token ids, got shape {data.shape}")
    if batch_size < 1 or context < 1:
        raise ValueError(f"random_windows: batch_size and context must be positive, got {batch_size}, {context}")
    if len(data) <= context:
        raise ValueError(f"random_windows: need more than context={context} tokens, got {len(data)}")
    if not isinstance(rng, np.random.Generator):
        rng = np.random.default_rng(rng)
    starts = rng.integers(0, len(data) - context, size=batch_size)
    windows = data[starts[:, None] + np.arange(context + 1)].astype(np.int32, copy=False)
    return windows[:, :-1], windows[:, 1:]
