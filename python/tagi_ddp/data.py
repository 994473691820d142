"""DataSpec dicts (the job files' "data" field) for Sequential.to_job_dict.

Paths are read by the workers, on their hosts, under their --data-root.
"""


def _limits(spec, train_limit, test_limit, standardize):
    if train_limit:
        spec["trainLimit"] = int(train_limit)
    if test_limit:
        spec["testLimit"] = int(test_limit)
    if standardize is not None:
        spec["standardize"] = bool(standardize)
    return spec


def fashion_mnist(train_limit=0, test_limit=0, standardize=None, **paths):
    """Fashion-MNIST IDX files; no paths: Debian's dataset-fashion-mnist.

    paths: train_images, train_labels, test_images, test_labels.
    """
    return _limits(_idx("FASHION_MNIST", paths), train_limit, test_limit, standardize)


def mnist(train_images, train_labels, test_images, test_labels, train_limit=0, test_limit=0,
          standardize=None):
    """MNIST-format IDX files (raw or gzip), 10 classes; images [n][rows][cols]."""
    paths = dict(train_images=train_images, train_labels=train_labels,
                 test_images=test_images, test_labels=test_labels)
    return _limits(_idx("MNIST", paths), train_limit, test_limit, standardize)


def _idx(kind, paths):
    names = {"train_images": "trainImages", "train_labels": "trainLabels",
             "test_images": "testImages", "test_labels": "testLabels"}
    unknown = set(paths) - set(names)
    if unknown:
        raise TypeError(f"unknown IDX path arguments {sorted(unknown)}; expected {sorted(names)}")
    spec = {"kind": kind}
    spec.update({names[k]: str(v) for k, v in paths.items()})
    return spec


def csv(train_csv, test_csv, target_columns=1, has_header=False, train_limit=0, test_limit=0,
        standardize=None):
    """Regression from CSV files: numeric columns, the last target_columns are targets."""
    spec = {"kind": "CSV", "trainCsv": str(train_csv), "testCsv": str(test_csv)}
    if target_columns != 1:
        spec["targetColumns"] = int(target_columns)
    if has_header:
        spec["csvHasHeader"] = True
    return _limits(spec, train_limit, test_limit, standardize)


def toy_cubic(train_size=None, test_size=None):
    """y = x^3 + noise, generated from the job seed (the TAGI paper's toy)."""
    spec = {"kind": "TOY_CUBIC"}
    if train_size is not None:
        spec["toyTrainSize"] = int(train_size)
    if test_size is not None:
        spec["toyTestSize"] = int(test_size)
    return spec


def cifar10(directory, random_crop_padding=0, horizontal_flip=False, train_limit=0,
            test_limit=0):
    """CIFAR-10's binary version: data_batch_1..5.bin and test_batch.bin in `directory`."""
    spec = {"kind": "CIFAR10", "cifar10Dir": str(directory)}
    augment = {}
    if random_crop_padding:
        augment["randomCropPadding"] = int(random_crop_padding)
    if horizontal_flip:
        augment["horizontalFlip"] = True
    if augment:
        spec["augment"] = augment
    return _limits(spec, train_limit, test_limit, None)
