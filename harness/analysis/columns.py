"""A Parquet file's columns read one at a time, when a metric asks for them (bounded memory).

A long run's summary and time series read `requests.parquet` through `ParquetColumns`: it answers
the part of a DataFrame's interface that harness/analysis/metrics.py and timeseries.py use
(`columns`, `len`, `in`, `frame[name]`), reading each column on demand exactly as `pd.read_parquet`
would (same dtype, same values), and keeps only the few columns read last. So the analysis of a
million requests holds a handful of columns at a time, never the whole frame, and computes the
same numbers to the last digit (the same values go through the same functions).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

T = TypeVar("T")


class ParquetColumns:
    """The columns of one Parquet file, each read when first asked for; the last `keep` stay cached."""

    def __init__(self, path: Path | str, keep: int = 2) -> None:
        self.path = Path(path)
        self._file = pq.ParquetFile(self.path)
        self._names = [n for n in self._file.schema_arrow.names if not n.startswith("__index_level_")]
        self._rows = int(self._file.metadata.num_rows)
        self._keep = max(1, int(keep))
        self._cache: OrderedDict[str, pd.Series] = OrderedDict()
        self._memo: dict[str, Any] = {}

    @property
    def columns(self) -> pd.Index:
        return pd.Index(self._names)

    def __len__(self) -> int:
        return self._rows

    def __contains__(self, name: object) -> bool:
        return name in self._names

    def __getitem__(self, name: str) -> pd.Series:
        if name not in self._names:
            raise KeyError(name)
        if name in self._cache:
            self._cache.move_to_end(name)
            return self._cache[name]
        while len(self._cache) >= self._keep:
            self._cache.popitem(last=False)
        column = self._file.read(columns=[name], use_threads=False).to_pandas(self_destruct=True)[name]
        pa.default_memory_pool().release_unused()
        self._cache[name] = column
        return column

    def memo(self, key: str, compute: Callable[[], T]) -> T:
        """A value derived from the columns (a mask), computed once: a metric asks for it many times."""
        if key not in self._memo:
            self._memo[key] = compute()
        value: T = self._memo[key]
        return value

    def frame(self, names: Sequence[str] | None = None) -> pd.DataFrame:
        """The named columns (all when None) as one DataFrame, equal to `pd.read_parquet(path, columns=...)`."""
        wanted = [n for n in (self._names if names is None else names) if n in self._names]
        if not wanted:
            return pd.read_parquet(self.path, columns=[])
        return pd.DataFrame({n: self[n] for n in wanted}, copy=False)

    def release(self) -> None:
        """Drop the cached columns and derived values (the file stays readable)."""
        self._cache.clear()
        self._memo.clear()


def memo(df: Any, key: str, compute: Callable[[], T]) -> T:
    """`compute()`, once per `ParquetColumns` (a plain DataFrame computes it every time)."""
    if isinstance(df, ParquetColumns):
        return df.memo(key, compute)
    return compute()


Frame = pd.DataFrame | ParquetColumns  # what the per-request metrics accept
