"""Arrays of an .npz archive mapped into memory where they lie, instead of read and copied.

`np.savez` stores each array uncompressed as an .npy file inside a zip archive, so every array's
bytes sit contiguously in the file; numpy's own loader copies them out all the same. Mapping them
lets a process that loads a large sparse index start without reading it: pages are read when a
query touches them. Compressed members (np.savez_compressed) are read the ordinary way.
"""

from __future__ import annotations

import struct
import zipfile
from pathlib import Path

import numpy as np

_LOCAL_HEADER = struct.Struct("<4s22xHH")  # signature, fields we skip, name length, extra length


def mapped_npz(path: Path) -> dict[str, np.ndarray]:
    """name -> array for every member of the archive; stored members copy-on-write memory maps."""
    arrays: dict[str, np.ndarray] = {}
    with zipfile.ZipFile(path) as archive, open(path, "rb") as handle:
        for info in archive.infolist():
            name = info.filename.removesuffix(".npy")
            if info.compress_type != zipfile.ZIP_STORED:
                with archive.open(info) as member:
                    arrays[name] = np.lib.format.read_array(member)
                continue
            handle.seek(info.header_offset)
            signature, name_length, extra_length = _LOCAL_HEADER.unpack(handle.read(_LOCAL_HEADER.size))
            if signature != b"PK\x03\x04":
                raise ValueError(f"{path}: damaged archive member {info.filename}")
            handle.seek(info.header_offset + _LOCAL_HEADER.size + name_length + extra_length)
            version = np.lib.format.read_magic(handle)
            read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape, fortran_order, dtype = read_header(handle)
            if dtype.hasobject:
                raise ValueError(f"{path}: {info.filename} holds Python objects, which cannot be mapped")
            if int(np.prod(shape)) == 0:
                arrays[name] = np.empty(shape, dtype=dtype)  # an empty mapping is an error
                continue
            # Copy-on-write: a library that sorts or casts in place gets private pages, never the file.
            arrays[name] = np.memmap(path, dtype=dtype, mode="c", offset=handle.tell(), shape=shape,
                                     order="F" if fortran_order else "C")
    return arrays
