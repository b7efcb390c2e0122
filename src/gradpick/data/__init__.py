"""Image sources at any model's input size: CIFAR-10, ImageFolder trees and uploads.

Hugging Face datasets' Parquet shards are a source too (``parquet_folder``).
Every source reads at an ``InputSpec`` (``DEFAULT_SPEC``, 32x32, is the built-ins'): each image
is decoded, converted to RGB and resized and centre-cropped by ``spec.prepare`` into uint8
[3, H, W]; models receive floats in [0, 1] (``ImageBatch.float_images``) and normalise inside,
so every gradient is with respect to pixels. Folder and upload sources keep file references
(paths, or the uploaded bytes), never decoded pixels: ``stream`` decodes them chunk by chunk in
DataLoader workers while the model runs, so a folder of 50,000 photos costs the memory of a few
chunks. A file that cannot be decoded is skipped and listed (``ReadReport``), not fatal.

Example::

    source = image_folder("photos/", spec=InputSpec(size=(224, 224), resize=256))
    for chunk in stream(source, chunk_size=64):
        logits = model(chunk.images.float() / 255)  # chunk.positions index into the source

The package reads bottom to top: ``decoding`` (bytes to pixels), ``sources`` (the source types
and the batch), ``folders`` (opening local paths), ``cifar10_download``, ``streaming`` (passes
in DataLoader workers) and ``batches``. Every name is re-exported here: ``gradpick.data.X``.
"""

from __future__ import annotations

from gradpick.data.batches import batch_positions, decoded_cache, load_batch, read_class_names
from gradpick.data.cifar10_download import (
    CIFAR10_DIR_ENV,
    CIFAR10_FILES,
    CIFAR10_FOLDER,
    Cifar10Mirror,
    cifar10,
    default_cifar10,
)
from gradpick.data.decoding import (
    DEFAULT_SPEC,
    IMAGE_SIZE,
    MAX_IMAGE_PIXELS,
    DecodedImage,
    decode,
    decode_image,
)
from gradpick.data.folders import (
    IMAGE_SUFFIXES,
    check_split,
    cifar10_batches_folder,
    image_folder,
    image_tree,
    open_source,
)
from gradpick.data.parquet import ParquetSource, is_parquet_dataset, parquet_folder
from gradpick.data.sources import (
    CACHE_DIR_ENV,
    CIFAR10_CLASSES,
    ArraySource,
    FolderSource,
    ImageBatch,
    ImageSource,
    ProgressCallback,
    UploadSource,
    cache_dir,
    check_positions,
    images_from_files,
    images_from_paths,
    read,
)
from gradpick.data.streaming import (
    NAMES_LISTED,
    Chunk,
    ReadReport,
    default_workers,
    read_chunk,
    stream,
)

__all__ = [
    "CACHE_DIR_ENV",
    "CIFAR10_CLASSES",
    "CIFAR10_DIR_ENV",
    "CIFAR10_FILES",
    "CIFAR10_FOLDER",
    "DEFAULT_SPEC",
    "IMAGE_SIZE",
    "IMAGE_SUFFIXES",
    "MAX_IMAGE_PIXELS",
    "NAMES_LISTED",
    "ArraySource",
    "Chunk",
    "Cifar10Mirror",
    "DecodedImage",
    "FolderSource",
    "ImageBatch",
    "ImageSource",
    "ParquetSource",
    "ProgressCallback",
    "ReadReport",
    "UploadSource",
    "batch_positions",
    "cache_dir",
    "check_positions",
    "check_split",
    "cifar10",
    "cifar10_batches_folder",
    "decode",
    "decode_image",
    "decoded_cache",
    "default_cifar10",
    "default_workers",
    "image_folder",
    "image_tree",
    "images_from_files",
    "images_from_paths",
    "is_parquet_dataset",
    "load_batch",
    "open_source",
    "parquet_folder",
    "read",
    "read_chunk",
    "read_class_names",
    "stream",
]
