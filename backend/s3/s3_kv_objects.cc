#include "backend/s3/s3_kv_objects.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

namespace dsfs::s3kv {

std::string Hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string Join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "/" + name;
}

std::string DataKey(const std::string& prefix, uint64_t id, uint64_t object) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%06llu", static_cast<unsigned long long>(object));
  return Join(prefix, "data/" + Hex64(id) + "/" + buf);
}

// The retry budget: the mount's options (s3_attempts=, s3_timeout=) where given, else the

Status RunPieces(uint64_t pieces, uint64_t threads, const std::function<Status(uint64_t)>& piece) {
  std::atomic<uint64_t> next{0};
  std::mutex mu;
  Status first_error;
  auto work = [&] {
    for (uint64_t i; (i = next.fetch_add(1)) < pieces;) {
      Status s;
      try {
        s = piece(i);
      } catch (const std::bad_alloc&) {
        s = Status::IOError("out of memory");
      } catch (const std::exception& e) {
        s = Status::IOError(e.what());
      }
      if (!s.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        if (first_error.ok()) first_error = s;
        next.store(pieces);
        return;
      }
    }
  };
  std::vector<std::thread> pool;
  for (uint64_t t = 1; t < std::min(pieces, threads); ++t) pool.emplace_back(work);
  work();  // this thread is one of them
  for (auto& t : pool) t.join();
  return first_error;
}

}  // namespace dsfs::s3kv
