// The optimizers a PrecisionTrainer builds from an OptimizerSpec (optim/trainer.h), one line each:
//   X(kind, Class)   kind: the OptimizerKind value and its --optimizer name; Class: the class,
//                    whose name() is the one messages and checkpoints use
// Each kind's factory, make_<kind>(params, spec, rounding, seed), is defined beside its class
// (optim/sgd.cpp, ...). The enum, the names and the factory switch are made from this list, so an
// optimizer is added with its class and one line here (docs/adding-an-optimizer.md).
#pragma once

#define MIXTAPE_OPTIMIZERS(X) \
  X(sgd, SGD)                 \
  X(adam, Adam)               \
  X(adamw, AdamW)             \
  X(rmsprop, RMSprop)         \
  X(adagrad, Adagrad)
