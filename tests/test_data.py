"""Tests for flowlite.data: readers on tiny files written here, datasets, and the DataLoader."""

import gzip
import threading
import time

import numpy as np
import pytest

import flowlite
from flowlite.data import (
    CharCorpus,
    DataLoader,
    Dataset,
    DatasetError,
    DatasetNotFoundError,
    LMWindowDataset,
    Subset,
    TensorDataset,
    collate_numpy,
    digits_split,
    load_cifar10,
    load_digits,
    load_mnist,
    load_text,
    random_split,
    random_windows,
    read_idx,
    stdlib_text,
)
from flowlite.data.loader import THREAD_NAME

# ---------------------------------------------------------------- helpers


def idx_bytes(array, magic):
    header = magic.to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in array.shape)
    return header + np.ascontiguousarray(array, dtype=np.uint8).tobytes()


def write(path, data, gz=False):
    if gz:
        path = path.with_name(path.name + ".gz")
        with gzip.open(path, "wb") as f:
            f.write(data)
    else:
        path.write_bytes(data)
    return path


def write_mnist(directory, split="train", n=5, gz=False, seed=0):
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, size=n, dtype=np.uint8)
    prefix = "train" if split == "train" else "t10k"
    write(directory / f"{prefix}-images-idx3-ubyte", idx_bytes(images, 2051), gz)
    write(directory / f"{prefix}-labels-idx1-ubyte", idx_bytes(labels, 2049), gz)
    return images, labels


def cifar_records(n, seed):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, size=n, dtype=np.uint8)
    pixels = rng.integers(0, 256, size=(n, 3072), dtype=np.uint8)
    return np.concatenate([labels[:, None], pixels], axis=1), labels, pixels


def write_cifar(folder, per_batch=2):
    folder.mkdir(parents=True, exist_ok=True)
    train = []
    for i in range(1, 6):
        records, labels, pixels = cifar_records(per_batch, seed=i)
        (folder / f"data_batch_{i}.bin").write_bytes(records.tobytes())
        train.append((labels, pixels))
    records, labels, pixels = cifar_records(3, seed=99)
    (folder / "test_batch.bin").write_bytes(records.tobytes())
    return train, (labels, pixels)


def numpy_batches(loader):
    return [tuple(np.asarray(a) for a in batch) for batch in loader]


def loader_threads():
    return [t for t in threading.enumerate() if t.name == THREAD_NAME and t.is_alive()]


def wait_until(condition, timeout=3.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


@pytest.fixture
def fake_from_numpy(monkeypatch):
    """Stand-in for flowlite.from_numpy (which the data package reaches through
    flowlite.extend) that records placements, so the default collation path is tested
    independently of the core."""
    calls = []

    def from_numpy(array, device=None):
        calls.append((array.shape, array.dtype, device))
        return ("placed", array, device)

    monkeypatch.setattr(flowlite.extend, "from_numpy", from_numpy)
    return calls


# ---------------------------------------------------------------- digits


def test_digits_shape_range_and_labels():
    images, labels = load_digits()
    assert images.shape == (1797, 1, 8, 8) and images.dtype == np.float32
    assert labels.shape == (1797,) and labels.dtype == np.int32
    assert images.min() == 0.0 and images.max() == 1.0
    assert set(np.unique(labels)) == set(range(10))
    assert np.bincount(labels).min() > 150  # roughly balanced classes
    images[0] = 5.0  # callers own their copy; the cached table must not change
    assert load_digits()[0].max() == 1.0


def test_digits_split_deterministic_and_disjoint():
    a = digits_split(0.2, seed=0)
    b = digits_split(0.2, seed=0)
    c = digits_split(0.2, seed=1)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a[1], c[1])
    train_x, train_y, test_x, test_y = a
    assert len(test_y) == round(1797 * 0.2) and len(train_y) + len(test_y) == 1797
    assert train_x.shape[1:] == (1, 8, 8)
    # Every image appears exactly once across the two parts.
    images, _ = load_digits()
    together = np.concatenate([train_x, test_x]).reshape(1797, -1)
    assert np.unique(together, axis=0).shape[0] == np.unique(images.reshape(1797, -1), axis=0).shape[0]
    with pytest.raises(ValueError, match="test_fraction"):
        digits_split(1.0)


# ---------------------------------------------------------------- MNIST / IDX


@pytest.mark.parametrize("gz", [False, True])
def test_mnist_reads_raw_and_gz(tmp_path, gz):
    images, labels = write_mnist(tmp_path, "train", n=5, gz=gz)
    write_mnist(tmp_path, "test", n=3, gz=gz, seed=1)
    x, y = load_mnist(tmp_path, "train")
    assert x.shape == (5, 1, 28, 28) and x.dtype == np.float32
    assert y.dtype == np.int32
    np.testing.assert_allclose(x[:, 0], images / 255.0, rtol=1e-6)
    np.testing.assert_array_equal(y, labels)
    assert 0.0 <= x.min() and x.max() <= 1.0
    x, y = load_mnist(tmp_path, "test", kind="fashion-mnist")
    assert x.shape == (3, 1, 28, 28) and y.shape == (3,)


def test_mnist_found_in_torchvision_layout(tmp_path):
    raw = tmp_path / "FashionMNIST" / "raw"
    raw.mkdir(parents=True)
    write_mnist(raw, "test", n=2, gz=True)
    x, _ = load_mnist(tmp_path, "test", kind="fashion-mnist")
    assert x.shape == (2, 1, 28, 28)


def test_mnist_missing_files_name_what_and_where(tmp_path):
    with pytest.raises(DatasetNotFoundError, match="does not exist") as info:
        load_mnist(tmp_path / "nowhere")
    assert "nowhere" in str(info.value)
    with pytest.raises(FileNotFoundError, match=r"train-images-idx3-ubyte or train-images-idx3-ubyte\.gz"):
        load_mnist(tmp_path)
    write_mnist(tmp_path, "train")
    (tmp_path / "train-labels-idx1-ubyte").unlink()
    with pytest.raises(DatasetNotFoundError, match="train-labels-idx1-ubyte") as info:
        load_mnist(tmp_path)
    assert str(tmp_path) in str(info.value)


def test_mnist_malformed_files(tmp_path):
    images, labels = write_mnist(tmp_path, "train", n=4)
    image_file = tmp_path / "train-images-idx3-ubyte"
    label_file = tmp_path / "train-labels-idx1-ubyte"

    image_file.write_bytes(idx_bytes(images, 2051)[:-10])
    with pytest.raises(DatasetError, match="truncated") as info:
        load_mnist(tmp_path)
    assert "train-images-idx3-ubyte" in str(info.value)

    image_file.write_bytes(idx_bytes(images, 2049))  # a label magic on the image file
    with pytest.raises(ValueError, match="magic number 2049 .expected 2051"):
        load_mnist(tmp_path)

    image_file.write_bytes(idx_bytes(images[:, :14, :14], 2051))
    with pytest.raises(DatasetError, match=r"expected \(28, 28\)"):
        load_mnist(tmp_path)

    image_file.write_bytes(idx_bytes(images, 2051))
    label_file.write_bytes(idx_bytes(labels[:3], 2049))
    with pytest.raises(DatasetError, match="4 images but .* 3 labels"):
        load_mnist(tmp_path)

    label_file.write_bytes(b"\x00\x00")
    with pytest.raises(DatasetError, match="no header"):
        load_mnist(tmp_path)

    label_file.unlink()
    (tmp_path / "train-labels-idx1-ubyte.gz").write_bytes(b"not gzip at all")
    with pytest.raises(DatasetError, match=r"train-labels-idx1-ubyte\.gz: cannot read"):
        load_mnist(tmp_path)


def test_mnist_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="split"):
        load_mnist(tmp_path, "validation")
    with pytest.raises(ValueError, match="kind"):
        load_mnist(tmp_path, kind="emnist")


def test_read_idx_generic(tmp_path):
    array = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    path = write(tmp_path / "a.idx", idx_bytes(array, 0x0803), gz=True)
    np.testing.assert_array_equal(read_idx(path), array)
    float_magic = 0x0D01  # IDX float32 type code: unsupported here
    bad = write(tmp_path / "f.idx", float_magic.to_bytes(4, "big") + (0).to_bytes(4, "big"))
    with pytest.raises(DatasetError, match="unsigned bytes"):
        read_idx(bad)


# ---------------------------------------------------------------- CIFAR-10


@pytest.mark.parametrize("point_at", ["parent", "folder"])
def test_cifar10_reads_binary_batches(tmp_path, point_at):
    folder = tmp_path / "cifar-10-batches-bin"
    train, (test_labels, test_pixels) = write_cifar(folder)
    data_dir = tmp_path if point_at == "parent" else folder
    x, y = load_cifar10(data_dir, "train")
    assert x.shape == (10, 3, 32, 32) and x.dtype == np.float32 and y.dtype == np.int32
    np.testing.assert_array_equal(y, np.concatenate([labels for labels, _ in train]))
    np.testing.assert_allclose(x[0].reshape(-1), train[0][1][0] / 255.0, rtol=1e-6)
    # channel-first: the first 1024 bytes of a record are the red plane, row-major
    np.testing.assert_allclose(x[0, 0, 0, :3], train[0][1][0][:3] / 255.0, rtol=1e-6)
    np.testing.assert_allclose(x[0, 1, 0, 0], train[0][1][0][1024] / 255.0, rtol=1e-6)
    x, y = load_cifar10(data_dir, "test")
    assert x.shape == (3, 3, 32, 32)
    np.testing.assert_array_equal(y, test_labels)


def test_cifar10_missing_and_malformed(tmp_path):
    with pytest.raises(DatasetNotFoundError, match="cifar-10-batches-bin") as info:
        load_cifar10(tmp_path)
    assert str(tmp_path) in str(info.value)
    (tmp_path / "cifar-10-binary.tar.gz").write_bytes(b"")
    with pytest.raises(DatasetNotFoundError, match="tar xzf"):
        load_cifar10(tmp_path)

    folder = tmp_path / "cifar-10-batches-bin"
    write_cifar(folder)
    (folder / "data_batch_3.bin").unlink()
    with pytest.raises(FileNotFoundError, match="missing data_batch_3.bin"):
        load_cifar10(tmp_path, "train")
    load_cifar10(tmp_path, "test")  # the test split does not need the train batches

    (folder / "test_batch.bin").write_bytes(b"\x01" * 3074)
    with pytest.raises(DatasetError, match="test_batch.bin: size 3074 bytes is not a positive multiple"):
        load_cifar10(tmp_path, "test")
    records, _, _ = cifar_records(1, 0)
    records[0, 0] = 42
    (folder / "test_batch.bin").write_bytes(records.tobytes())
    with pytest.raises(DatasetError, match="label 42"):
        load_cifar10(tmp_path, "test")
    with pytest.raises(ValueError, match="split"):
        load_cifar10(tmp_path, "val")


# ---------------------------------------------------------------- text


def test_char_corpus_from_file(tmp_path):
    text = "hello world\nhéllo wörld\n" * 20
    path = tmp_path / "corpus.txt"
    path.write_text(text, encoding="utf-8")
    corpus = load_text(path)
    assert corpus.vocab == sorted(set(text))
    assert corpus.vocab_size == len(set(text))
    assert corpus.data.dtype == np.int32 and len(corpus) == len(text)
    assert corpus.decode(corpus.data) == text
    assert corpus.decode(corpus.encode("héllo")) == "héllo"
    assert all(corpus.stoi[ch] == i for i, ch in enumerate(corpus.itos))
    assert len(corpus.val) == round(0.1 * len(text))
    np.testing.assert_array_equal(np.concatenate([corpus.train, corpus.val]), corpus.data)
    with pytest.raises(ValueError, match="U\\+00E7"):
        corpus.encode("ç")
    counts = np.array([text.count(ch) for ch in corpus.vocab], dtype=np.float64) / len(text)
    assert corpus.unigram_entropy() == pytest.approx(float(-(counts * np.log(counts)).sum()))
    assert load_text(path, max_chars=5).decode(load_text(path, max_chars=5).data) == "hello"


def test_char_corpus_ascii_only_maps_below_128(tmp_path):
    path = tmp_path / "c.txt"
    path.write_bytes("añb\x1a".encode("utf-8") + b"\xff\xfe")  # invalid UTF-8 is replaced
    corpus = load_text(path, ascii_only=True)
    assert corpus.vocab_size == 128 and corpus.data.max() < 128
    sub = CharCorpus.REPLACEMENT_ID
    assert corpus.data.tolist() == [ord("a"), sub, ord("b"), sub, sub, sub]
    assert corpus.decode(corpus.encode("a€z")) == "a\ufffdz"
    assert corpus.encode(corpus.decode([sub])).tolist() == [sub]


def test_default_corpus_is_the_standard_library():
    text = stdlib_text(max_chars=20_000)
    assert len(text) == 20_000 and "def " in text and "import" in text
    assert stdlib_text(max_chars=20_000) == text  # deterministic order
    corpus = load_text(max_chars=20_000)
    assert 0 < corpus.unigram_entropy() < np.log(corpus.vocab_size)
    assert corpus.unigram_entropy("val") > 0


def test_text_errors_name_the_file(tmp_path):
    with pytest.raises(DatasetNotFoundError, match="missing.txt: not found"):
        load_text(tmp_path / "missing.txt")
    with pytest.raises(DatasetNotFoundError, match="is a directory"):
        load_text(tmp_path)
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(DatasetError, match="empty.txt: has 0 characters"):
        load_text(empty)


def test_lm_windows_shift_by_one():
    data = np.arange(20, dtype=np.int32)
    ds = LMWindowDataset(data, context=4)
    assert len(ds) == 16
    x, y = ds[3]
    assert x.tolist() == [3, 4, 5, 6] and y.tolist() == [4, 5, 6, 7]
    assert ds[-1][1].tolist() == [16, 17, 18, 19]
    bx, by = ds.get_batch(np.array([0, 15]))
    assert bx.tolist() == [[0, 1, 2, 3], [15, 16, 17, 18]] and by[1].tolist() == [16, 17, 18, 19]
    with pytest.raises(IndexError):
        ds[16]
    with pytest.raises(ValueError, match="more than context=20"):
        LMWindowDataset(data, context=20)

    rx, ry = random_windows(data, 8, 5, np.random.default_rng(0))
    assert rx.shape == ry.shape == (8, 5) and rx.dtype == np.int32
    np.testing.assert_array_equal(ry, rx + 1)
    assert ry.max() <= 19
    again = random_windows(data, 8, 5, np.random.default_rng(0))
    np.testing.assert_array_equal(again[0], rx)


# ---------------------------------------------------------------- datasets and splits


def test_tensor_dataset_items_and_length_errors():
    x = np.arange(12, dtype=np.float32).reshape(6, 2)
    y = np.arange(6)
    ds = TensorDataset(x, y)
    assert len(ds) == 6
    item = ds[2]
    np.testing.assert_array_equal(item[0], [4, 5])
    assert item[1] == 2
    batch = ds.get_batch(np.array([1, 3]))
    np.testing.assert_array_equal(batch[1], [1, 3])
    with pytest.raises(ValueError, match=r"argument 0: 6 .*argument 1: 5"):
        TensorDataset(x, y[:5])
    with pytest.raises(ValueError, match="at least one"):
        TensorDataset()
    with pytest.raises(ValueError, match="scalar"):
        TensorDataset(np.float32(1.0))


def test_tensor_dataset_reads_back_objects_with_numpy_method():
    class FakeTensor:
        def numpy(self):
            return np.ones((3, 2), dtype=np.float32)

    ds = TensorDataset(FakeTensor(), [0, 1, 2])
    assert isinstance(ds.arrays[0], np.ndarray) and len(ds) == 3


def test_dataset_base_is_pytorchs():
    # like torch.utils.data.Dataset: instantiable, indexing a bare one names the missing method
    with pytest.raises(NotImplementedError, match="__getitem__"):
        Dataset()[0]


@pytest.mark.parametrize("lengths", [[7, 3], [0.7, 0.3], [0.5, 0.25, 0.25], [0.33, 0.33, 0.34]])
def test_random_split_lengths_and_disjointness(lengths):
    ds = TensorDataset(np.arange(10))
    parts = random_split(ds, lengths, seed=3)
    assert sum(len(p) for p in parts) == 10
    seen = sorted(int(p[i][0]) for p in parts for i in range(len(p)))
    assert seen == list(range(10))
    if lengths == [0.33, 0.33, 0.34]:  # floor(3.3)=3 each, remainder 1 goes to the first
        assert [len(p) for p in parts] == [4, 3, 3]


def test_random_split_determinism_and_errors():
    ds = TensorDataset(np.arange(100))
    a = random_split(ds, [0.8, 0.2], seed=1)
    b = random_split(ds, [0.8, 0.2], generator=np.random.default_rng(1))
    c = random_split(ds, [0.8, 0.2], seed=2)
    np.testing.assert_array_equal(a[1].indices, b[1].indices)
    assert not np.array_equal(a[1].indices, c[1].indices)
    with pytest.raises(ValueError, match="sum to 99"):
        random_split(ds, [90, 9])
    with pytest.raises(ValueError, match="sum to 1"):
        random_split(ds, [0.5, 0.4])
    with pytest.raises(ValueError, match="either seed or generator"):
        random_split(ds, [50, 50], seed=0, generator=np.random.default_rng(0))
    with pytest.raises(IndexError, match="index 100"):
        Subset(ds, [1, 100])


# ---------------------------------------------------------------- DataLoader


def test_collate_numpy_structures_and_dtypes():
    items = [(np.ones((2,), np.float32) * i, i, float(i), np.int64(i)) for i in range(3)]
    x, a, b, c = collate_numpy(items)
    assert x.shape == (3, 2) and x.dtype == np.float32
    assert a.dtype == np.int32 and b.dtype == np.float32 and c.dtype == np.int64
    d = collate_numpy([{"x": np.zeros(2), "y": 1}, {"x": np.ones(2), "y": 2}])
    assert d["x"].shape == (2, 2) and d["y"].tolist() == [1, 2]
    with pytest.raises(ValueError, match=r"batch\[0\]: item 0 has shape \(2,\) but item 1 has shape \(3,\)"):
        collate_numpy([(np.zeros(2), 0), (np.zeros(3), 1)])
    with pytest.raises(ValueError, match="2 fields but item 1 has 1"):
        collate_numpy([(1, 2), (3,)])


def test_loader_batches_len_and_drop_last():
    ds = TensorDataset(np.arange(10, dtype=np.float32), np.arange(10))
    loader = DataLoader(ds, batch_size=4, collate_fn=collate_numpy)
    batches = numpy_batches(loader)
    assert len(loader) == len(batches) == 3
    assert [b[0].tolist() for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    loader = DataLoader(ds, batch_size=4, drop_last=True, collate_fn=collate_numpy)
    assert len(loader) == len(numpy_batches(loader)) == 2
    assert len(DataLoader(ds, batch_size=5, drop_last=True)) == 2
    assert len(DataLoader(TensorDataset(np.zeros(0)), batch_size=3)) == 0
    assert list(DataLoader(TensorDataset(np.zeros(0)), batch_size=3, collate_fn=collate_numpy)) == []
    with pytest.raises(ValueError, match="batch_size"):
        DataLoader(ds, batch_size=0)
    with pytest.raises(ValueError, match="rank 2"):
        DataLoader(ds, num_replicas=2, rank=2)


def test_default_collation_places_every_array(fake_from_numpy):
    class Pairs(Dataset):  # no get_batch: the per-item path
        def __len__(self):
            return 5

        def __getitem__(self, i):
            return np.full((2, 3), i, np.float32), i

    batches = list(DataLoader(Pairs(), batch_size=2, device="cpu:0"))
    assert len(batches) == 3
    tag, x, device = batches[0][0]
    assert tag == "placed" and device == "cpu:0" and x.shape == (2, 2, 3)
    assert batches[2][1][1].tolist() == [4]
    assert (fake_from_numpy[1][0], fake_from_numpy[1][1]) == ((2,), np.int32)


def test_fast_path_gathers_whole_batches(fake_from_numpy, monkeypatch):
    ds = TensorDataset(np.arange(20, dtype=np.float32).reshape(10, 2), np.arange(10, dtype=np.int32))
    per_item = []
    original = TensorDataset.__getitem__
    monkeypatch.setattr(TensorDataset, "__getitem__", lambda self, i: per_item.append(i) or original(self, i))
    sub = random_split(ds, [6, 4], seed=0)[0]
    loader = DataLoader(sub, batch_size=4, shuffle=True, seed=5)
    batches = list(loader)
    xs = np.concatenate([b[0][1] for b in batches])
    ys = np.concatenate([b[1][1] for b in batches])
    assert per_item == []  # TensorDataset (even through a Subset) is gathered, not iterated
    assert sorted(ys.tolist()) == sorted(sub.indices.tolist())
    np.testing.assert_array_equal(xs[:, 0], ys * 2)


def test_shuffle_deterministic_per_seed_and_epoch():
    ds = TensorDataset(np.arange(50))

    def epoch_orders(loader, epochs=3):
        return [np.concatenate([b[0] for b in loader]).tolist() for _ in range(epochs)]

    a = epoch_orders(DataLoader(ds, batch_size=8, shuffle=True, seed=7, collate_fn=collate_numpy))
    b = epoch_orders(DataLoader(ds, batch_size=8, shuffle=True, seed=7, collate_fn=collate_numpy))
    c = epoch_orders(DataLoader(ds, batch_size=8, shuffle=True, seed=8, collate_fn=collate_numpy))
    assert a == b and a != c
    assert a[0] != a[1] != a[2] and all(sorted(o) == list(range(50)) for o in a)
    assert a[1] == c[0]  # epoch e uses seed + e
    resumed = DataLoader(ds, batch_size=8, shuffle=True, seed=7, collate_fn=collate_numpy)
    resumed.set_epoch(1)
    assert epoch_orders(resumed, 2) == a[1:]
    plain = epoch_orders(DataLoader(ds, batch_size=8, collate_fn=collate_numpy), 1)
    assert plain[0] == list(range(50))


@pytest.mark.parametrize("n", [10, 11, 3])
def test_replica_sharding_disjoint_equal_and_padded(n):
    ds = TensorDataset(np.arange(n))
    replicas = 4
    loaders = [
        DataLoader(ds, batch_size=2, shuffle=True, seed=1, num_replicas=replicas, rank=r, collate_fn=collate_numpy)
        for r in range(replicas)
    ]
    shards = [np.concatenate([b[0] for b in loader]).tolist() for loader in loaders]
    per = -(-n // replicas)
    assert all(len(s) == per for s in shards)
    assert all(len(loader) == -(-per // 2) for loader in loaders)
    together = sum(shards, [])
    assert set(together) == set(range(n))  # every sample is seen
    assert len(together) - len(set(together)) == per * replicas - n  # only the padding repeats
    order = loaders[0].indices_for_epoch(0)
    full = np.random.default_rng(1).permutation(n)
    assert order.tolist() == np.resize(full, per * replicas)[0::replicas].tolist()
    with pytest.raises(ValueError, match="needs a seed"):
        DataLoader(ds, shuffle=True, num_replicas=2, rank=0)


class Recording(Dataset):
    def __init__(self, n, fail_at=None):
        self.n, self.fail_at, self.seen = n, fail_at, []

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i == self.fail_at:
            raise KeyError(f"broken sample {i}")
        self.seen.append(i)
        return (np.float32(i),)


def test_background_thread_prefetches_ahead():
    ds = Recording(40)
    it = iter(DataLoader(ds, batch_size=2, prefetch=2, collate_fn=collate_numpy))
    first = next(it)
    assert first[0].tolist() == [0.0, 1.0]
    # While the consumer holds batch 0, the thread fills the queue with the next batches.
    assert wait_until(lambda: len(ds.seen) >= 2 * 3)
    assert len(ds.seen) < 40
    it.close()


def test_early_break_releases_the_thread():
    before = len(loader_threads())
    ds = Recording(1000)
    for k, _ in enumerate(DataLoader(ds, batch_size=1, prefetch=1, collate_fn=collate_numpy)):
        if k == 2:
            break
    assert wait_until(lambda: len(loader_threads()) <= before)
    assert len(ds.seen) < 10

    it = iter(DataLoader(Recording(1000), batch_size=1, prefetch=1, collate_fn=collate_numpy))
    next(it)
    del it  # dropping the iterator without close() must also stop the thread
    assert wait_until(lambda: len(loader_threads()) <= before)


@pytest.mark.parametrize("prefetch", [0, 2])
def test_exceptions_reach_the_consumer(prefetch):
    loader = DataLoader(Recording(10, fail_at=5), batch_size=2, prefetch=prefetch, collate_fn=collate_numpy)
    got = []
    with pytest.raises(KeyError, match="broken sample 5"):
        for batch in loader:
            got.append(batch[0].tolist())
    assert got == [[0.0, 1.0], [2.0, 3.0]]


def test_collation_produces_flowlite_tensors():
    x = np.arange(24, dtype=np.float32).reshape(6, 4)
    y = np.arange(6, dtype=np.int32)
    batches = list(DataLoader(TensorDataset(x, y), batch_size=4))
    assert len(batches) == 2
    xb, yb = batches[0]
    assert isinstance(xb, flowlite.Tensor) and isinstance(yb, flowlite.Tensor)
    assert tuple(xb.shape) == (4, 4) and tuple(yb.shape) == (4,)
    np.testing.assert_array_equal(xb.numpy(), x[:4])
    np.testing.assert_array_equal(yb.numpy(), y[:4])
    assert xb.numpy().dtype == np.float32 and yb.numpy().dtype == np.int32
    np.testing.assert_array_equal(batches[1][0].numpy(), x[4:])
