// Moved to executor/cuda/graph_replays.h (the CUDA graph capture and replay
// machinery lives with the CUDA target's thunks); this path forwards there for
// the includes not moved yet.
#pragma once
#include "executor/cuda/graph_replays.h"
