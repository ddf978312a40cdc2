"""The MNIST-format IDX reader: the four original ``.gz`` files, their headers checked before
any pixel is used, read whole or (one process's share) as a stream."""

from __future__ import annotations

import gzip
import io
import os
import zlib

import numpy as np

# the four original files, by the split they hold
IDX_FILES = {
    "x_train": "train-images-idx3-ubyte.gz",
    "y_train": "train-labels-idx1-ubyte.gz",
    "x_test": "t10k-images-idx3-ubyte.gz",
    "y_test": "t10k-labels-idx1-ubyte.gz",
}
_IMAGE_MAGIC, _LABEL_MAGIC = 2051, 2049  # IDX: 0x0803 = unsigned bytes, 3 dims; 0x0801 = 1 dim
_SIDE, _NUM_CLASSES, _MAX_TRAIN = 28, 10, 60000


def _files_list() -> str:
    return ", ".join(IDX_FILES.values())


def _idx_folder(name: str, folder: str, what: str) -> str:
    """The folder among ``folder`` and ``folder/<name>`` that holds all four IDX files."""
    if not os.path.isdir(folder):
        raise ValueError(f"{what} {folder} does not exist: pass the folder that holds the four {name} IDX files ({_files_list()})")
    best: list[str] | None = None
    for cand in (folder, os.path.join(folder, name)):
        if os.path.isdir(cand):
            missing = [f for f in IDX_FILES.values() if not os.path.isfile(os.path.join(cand, f))]
            if not missing:
                return cand
            if best is None or len(missing) < len(best):
                best = missing
    raise ValueError(
        f"{what} {folder} does not hold the {name} IDX files (missing {', '.join(best or [])}): put the four "
        f"original files {_files_list()} in {folder} or {os.path.join(folder, name)}"
    )


MAX_IDX_BYTES = 256 * 2**20
"""An IDX file inflating to more than this is refused (MNIST's largest file is 47 MB): a
corrupt or hostile .gz cannot make the reader allocate gigabytes."""


def _gunzip(path: str, limit: int = MAX_IDX_BYTES) -> bytes:
    """The inflated bytes of a .gz file, reading at most ``limit`` + 1 bytes."""
    try:
        with gzip.open(path, "rb") as f:
            raw = f.read(limit + 1)
    except (EOFError, OSError, zlib.error) as e:
        raise ValueError(f"{path} is truncated or not gzip data ({e}): replace it with the original {os.path.basename(path)}") from None
    if len(raw) > limit:
        raise ValueError(
            f"{path} inflates to more than {limit // 2**20} MiB, far more than an MNIST-format IDX file: "
            f"replace it with the original {os.path.basename(path)}"
        )
    return raw


def _parse_idx(raw: bytes, path: str, images: bool) -> np.ndarray:
    """Check an IDX header and return the payload as uint8 ``(n, 28, 28)`` or ``(n,)``."""
    shape = _idx_shape(raw, len(raw), path, images)
    return np.frombuffer(raw, np.uint8, offset=16 if images else 8).reshape(shape)


def _idx_shape(raw: bytes, size: int, path: str, images: bool) -> tuple[int, ...]:
    """Check an IDX header (the first bytes ``raw`` of a file of ``size`` inflated bytes)
    and return the payload's shape ``(n, 28, 28)`` or ``(n,)``."""
    magic, header = (_IMAGE_MAGIC, 16) if images else (_LABEL_MAGIC, 8)
    kind = "images" if images else "labels"
    found = int.from_bytes(raw[:4], "big") if len(raw) >= 4 else None
    if found is not None and found != magic:
        other = {_IMAGE_MAGIC: "an images file", _LABEL_MAGIC: "a labels file"}.get(found, "not an IDX file of unsigned bytes")
        raise ValueError(
            f"{path} has IDX magic number {found}, expected {magic} ({kind}): it is {other}; use the original {os.path.basename(path)}"
        )
    if size < header:
        raise ValueError(f"{path} is truncated ({size} bytes, shorter than the IDX header): replace it with the original file")
    dims = np.frombuffer(raw, ">u4", count=header // 4)
    n = int(dims[1])
    shape = (n, int(dims[2]), int(dims[3])) if images else (n,)
    if images and shape[1:] != (_SIDE, _SIDE):
        raise ValueError(f"{path} holds {shape[1]}×{shape[2]} images, expected 28×28: use the original MNIST-format files")
    expected = header + int(np.prod(shape, dtype=np.int64))
    if size != expected:
        state = "is truncated" if size < expected else "has extra bytes"
        raise ValueError(
            f"{path} {state}: its header announces {n} {kind} ({expected} bytes) but it holds {size} bytes; "
            f"replace it with the original file"
        )
    return shape


def _read_idx_folder(name: str, folder: str) -> tuple[np.ndarray, ...]:
    """x_train, y_train, x_test, y_test as uint8 from the four IDX files in ``folder``."""
    out = {}
    for key, fname in IDX_FILES.items():
        path = os.path.join(folder, fname)
        out[key] = _parse_idx(_gunzip(path), path, images=key.startswith("x"))
    for split in ("train", "test"):
        _check_idx_pair(name, folder, split, len(out[f"x_{split}"]), out[f"y_{split}"])
    return out["x_train"], out["y_train"], out["x_test"], out["y_test"]


def _check_idx_pair(name: str, folder: str, split: str, nx: int, labels: np.ndarray) -> None:
    ny = len(labels)
    if nx != ny:
        raise ValueError(
            f"{folder}: {IDX_FILES['x_' + split]} has {nx} images but {IDX_FILES['y_' + split]} has {ny} labels: "
            f"the files do not belong together; use the four original {name} files"
        )
    if (labels >= _NUM_CLASSES).any():
        raise ValueError(f"{folder}: {IDX_FILES['y_' + split]} has labels ≥ {_NUM_CLASSES}: not {name} labels")


_PIXELS = _SIDE * _SIDE
_CHUNK = 4096  # images per streamed read


class _IdxTrain:
    """The IDX training split read by rows (``load(shard=...)``): the labels and the test files
    are read whole (small), the training images file is inflated as a stream (``gzip`` seeks
    by decompressing forward) and only the rows asked for are kept. Same checks as
    :func:`_read_idx_folder`."""

    def __init__(self, name: str, folder: str):
        self.name, self.folder = name, folder
        self.path = os.path.join(folder, IDX_FILES["x_train"])
        labels_path = os.path.join(folder, IDX_FILES["y_train"])
        self.labels = _parse_idx(_gunzip(labels_path), labels_path, images=False)
        with self._open() as f:
            head = f.read(16)
            size = f.seek(0, io.SEEK_END)  # inflates the file once, keeping none of it
        if size > MAX_IDX_BYTES:
            raise ValueError(
                f"{self.path} inflates to more than {MAX_IDX_BYTES // 2**20} MiB, far more than an MNIST-format IDX file: "
                f"replace it with the original {os.path.basename(self.path)}"
            )
        self.n = _idx_shape(head, size, self.path, images=True)[0]
        _check_idx_pair(name, folder, "train", self.n, self.labels)

    def _open(self):
        try:
            return gzip.open(self.path, "rb")
        except OSError as e:
            raise ValueError(f"{self.path} cannot be read ({e})") from None

    def _chunks(self, a: int, b: int):
        """The images of rows ``[a, b)``, uint8 ``(m, 28, 28)``, in blocks of at most ``_CHUNK``."""
        try:
            with self._open() as f:
                f.seek(16 + a * _PIXELS)
                for start in range(a, b, _CHUNK):
                    m = min(_CHUNK, b - start)
                    yield np.frombuffer(f.read(m * _PIXELS), np.uint8).reshape(m, _SIDE, _SIDE)
        except (EOFError, OSError, zlib.error) as e:
            raise ValueError(
                f"{self.path} is truncated or not gzip data ({e}): replace it with the original {os.path.basename(self.path)}"
            ) from None

    def rows(self, a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
        """Images ``(b − a, 28, 28)`` and labels ``(b − a,)`` of training rows ``[a, b)``, uint8."""
        x = np.concatenate(list(self._chunks(a, b))) if b > a else np.zeros((0, _SIDE, _SIDE), np.uint8)
        return x, self.labels[a:b].copy()

    def sums(self, stop: int) -> tuple[int, int]:
        """Exact sum and sum of squares of every pixel of rows ``[0, stop)`` (Python ints)."""
        s1 = s2 = 0
        for chunk in self._chunks(0, stop):
            c = chunk.astype(np.int64)
            s1, s2 = s1 + int(c.sum()), s2 + int((c * c).sum())
        return s1, s2

    def test(self) -> tuple[np.ndarray, np.ndarray]:
        out = []
        for key in ("x_test", "y_test"):
            path = os.path.join(self.folder, IDX_FILES[key])
            out.append(_parse_idx(_gunzip(path), path, images=key == "x_test"))
        _check_idx_pair(self.name, self.folder, "test", len(out[0]), out[1])
        return out[0], out[1]
