"""Records of the most numerous types (calls, accesses, placements) held as columns.

A trace file stores 64-byte records (analysis/trace_file.py). Read field by field from them,
every field reads all 64 bytes of every record again; the loader reads about ten fields of each
access, so the reader transposes these records once instead, straight from the file's bytes.
"""
from __future__ import annotations

import numpy as np

from .threads import in_ranges


class Columns:
    """Records of one type (64-byte records of a structured dtype from trace_file.py) held as
    columns: eight uint64 words per record, word i being bytes 8i..8i+7. A field is a view of its
    word, strided for the narrower fields (the words are little-endian), made on first use. Read
    from 64-byte records, every field would read all 64 bytes of every record again (~3x slower
    for the ten fields an access has); held as columns, the records are transposed once, a
    cache-sized block at a time.

    Indexed like the structured array it stands for: cols["field"] (read-only: copy before writing
    into it), cols[mask or rows] (the selected records), len(cols), cols.dtype."""

    BLOCK = 8192  # records per transposed block: 512 KiB, within a core's L2

    def __init__(self, words: np.ndarray, dtype: np.dtype):
        assert dtype.itemsize == 64 and words.shape[0] == 8 and (words.shape[1] < 2 or words.strides[1] == 8)
        self.words, self.dtype = words, dtype
        self._fields: dict[str, np.ndarray] = {}

    @classmethod
    def of_rows(cls, rows: np.ndarray, dtype: np.dtype, take: np.ndarray | None = None) -> "Columns":
        """From records as an (n, 8) uint64 array (a file's bytes, say), all or those at `take`."""
        n = len(rows) if take is None else len(take)
        words = np.empty((8, n), np.uint64)

        def transpose(first: int, last: int) -> None:
            for start in range(first, last, cls.BLOCK):  # one numpy call per block, not per record
                stop = min(start + cls.BLOCK, last)
                block = rows[start:stop] if take is None else rows[take[start:stop]]
                words[:, start:stop] = block.T

        in_ranges(n, transpose, align=cls.BLOCK)  # ranges of blocks side by side on the cores
        return cls(words, dtype)

    @classmethod
    def of_records(cls, recs: np.ndarray) -> "Columns":
        """From a structured array of 64-byte records."""
        rows = np.ascontiguousarray(recs).view(np.uint64).reshape(len(recs), 8)
        return cls.of_rows(rows, recs.dtype)

    def __len__(self) -> int:
        return self.words.shape[1]

    def __getitem__(self, key):
        if isinstance(key, slice):
            return Columns(self.words[:, key], self.dtype)
        if not isinstance(key, str):  # a selection of records (a mask or positions)
            key = np.asarray(key)
            rows = np.flatnonzero(key) if key.dtype == bool else key
            # np.take keeps the words C-contiguous, which the fields' views need; words[:, mask]
            # would not, and is ~10x slower.
            return Columns(np.take(self.words, rows, axis=1), self.dtype)
        f = self._fields.get(key)
        if f is None:
            dtype, offset = self.dtype.fields[key][:2]  # type: ignore[index]  # a record dtype: fields is set
            word, shift = divmod(offset, 8)
            if dtype.shape or shift + dtype.itemsize > 8:
                raise KeyError(f"{key}: only scalar fields within one word are held as columns")
            if shift % dtype.itemsize:
                raise KeyError(f"{key}: a field not aligned to its size is not held as a column")
            # A strided view of the field's bytes within its word (little-endian): no copy.
            per_word = 8 // dtype.itemsize
            f = self.words[word].view(dtype)[shift // dtype.itemsize::per_word]
            f.flags.writeable = False
            self._fields[key] = f
        return f

    def records(self) -> np.ndarray:
        """The structured array these columns hold."""
        return np.ascontiguousarray(self.words.T).view(self.dtype).reshape(len(self))


def word_of_rows(rows: np.ndarray, dtype: np.dtype, field: str, take: np.ndarray) -> np.ndarray:
    """One 8-byte field of the records at `take` of (n, 8) uint64 rows, gathered without the
    rest of each record (a selection that needs one field of millions of records)."""
    ftype, offset = dtype.fields[field][:2]  # type: ignore[index]  # a record dtype: fields is set
    if ftype.itemsize != 8 or offset % 8:
        raise KeyError(f"{field}: not a whole 8-byte word of its record")
    return rows[take, offset // 8].view(ftype)
