// Datasets and batching: IDX (MNIST-format) files, text corpora, image folders, DataLoader,
// augmentation.
#pragma once

#include "data/augment.h"
#include "data/idx.h"
#include "data/image_folder.h"
#include "data/loader.h"
#include "data/text.h"
