#include "cache/disk_error.h"

namespace lazyjit::cache {

const char* disk_error_name(DiskError e) {
  switch (e) {
    case DiskError::Corrupt: return "corrupt";
    case DiskError::Foreign: return "foreign";
    case DiskError::Unsigned: return "unsigned";
    case DiskError::BadSignature: return "bad_signature";
    case DiskError::ReadOnly: return "read_only";
    case DiskError::Full: return "full";
    case DiskError::Permission: return "permission";
    case DiskError::Io: return "io";
    case DiskError::WrongKey: return "wrong_key";
    case DiskError::NotAFile: return "not_a_file";
  }
  return "unknown";
}

}  // namespace lazyjit::cache
