// dsfs-gentar: a deterministic ImageFolder-shaped data set of many small files, for scale tests.
//
//   dsfs-gentar [--files N] [--classes C] [--seed S] [--prefix DIR]     > data.tar
//   dsfs-gentar ... --tree ROOT [--empty]      (the same paths as files on disk)
//   dsfs-gentar ... --list K [--list-seed S]   (K random file paths of the set, one a line)
//
// The set: N files (default 10,000,000) spread evenly over C class directories (default 1000),
// PREFIX/class_CCCC/img_IIIIIIII.jpg (file i is in class i % C; PREFIX default "train").
// File i holds 100 to 600 bytes that depend only on (seed, i): a JPEG-like 20-byte header shared
// by all files, then bytes of varied entropy (runs, small-alphabet and uniform random stretches),
// so the set compresses partly, like small images do.
// Default output is a POSIX ustar stream on stdout (directory entries first, then each class's
// files in order), streamed without building anything in memory. --tree writes the same tree
// under ROOT (--empty: zero-length files, for a metadata-only comparison). --list prints K
// distinct-ish random paths (uniform over the set, with replacement), relative to the tar root.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct Options {
  std::uint64_t files = 10'000'000;
  std::uint64_t classes = 1000;
  std::uint64_t seed = 1;
  std::string prefix = "train";
  std::string tree;
  bool empty = false;
  std::uint64_t list = 0;
  std::uint64_t list_seed = 7;
};

[[noreturn]] void usage(const char* msg) {
  if (msg) std::fprintf(stderr, "dsfs-gentar: %s\n", msg);
  std::fprintf(stderr,
               "usage: dsfs-gentar [--files N] [--classes C] [--seed S] [--prefix DIR] > out.tar\n"
               "       dsfs-gentar ... --tree ROOT [--empty]\n"
               "       dsfs-gentar ... --list K [--list-seed S]\n");
  std::exit(2);
}

std::uint64_t number(const char* s) {
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(s, &end, 10);
  if (errno || end == s || *end) usage((std::string("bad number: ") + s).c_str());
  return v;
}

// splitmix64: a small, fast, well-mixed generator; the data depends on nothing else.
struct Rng {
  std::uint64_t s;
  std::uint64_t next() {
    std::uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
};

std::string class_dir(const Options& o, std::uint64_t c) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "class_%04llu", static_cast<unsigned long long>(c));
  return o.prefix.empty() ? std::string(buf) : o.prefix + "/" + buf;
}

std::string file_name(std::uint64_t i) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "img_%08llu.jpg", static_cast<unsigned long long>(i));
  return buf;
}

// The bytes of file i.
void content(const Options& o, std::uint64_t i, std::vector<unsigned char>* out) {
  static const unsigned char kHeader[20] = {0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x10, 'J',
                                            'F',  'I',  'F',  0x00, 0x01, 0x01, 0x00,
                                            0x00, 0x01, 0x00, 0x01, 0x00, 0x00};
  Rng r{o.seed * 0x100000001B3ull ^ i};
  std::size_t size = 100 + r.next() % 501;
  out->assign(kHeader, kHeader + sizeof kHeader);
  while (out->size() < size) {
    std::uint64_t kind = r.next() % 4;
    std::size_t len = 8 + r.next() % 56;
    for (std::size_t k = 0; k < len && out->size() < size; ++k) {
      std::uint64_t v = r.next();
      switch (kind) {
        case 0:
          out->push_back(static_cast<unsigned char>(i >> 3));
          break;  // a run
        case 1:
          out->push_back(static_cast<unsigned char>("0123456789abcdef"[v & 15]));
          break;
        default:
          out->push_back(static_cast<unsigned char>(v));
          break;  // noise
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// ustar

class TarWriter {
 public:
  TarWriter() { buf_.reserve(kFlush + 4096); }
  ~TarWriter() { flush(); }

  void entry(const std::string& path, bool dir, const unsigned char* data, std::size_t size) {
    unsigned char h[512] = {};
    std::string name = path, prefix;
    if (name.size() > 100) {
      std::size_t cut = name.rfind('/', 155);
      if (cut == std::string::npos || name.size() - cut - 1 > 100) usage("path too long for ustar");
      prefix = name.substr(0, cut);
      name = name.substr(cut + 1);
    }
    std::memcpy(h, name.data(), name.size());
    octal(h + 100, 8, dir ? 0755 : 0644);
    octal(h + 108, 8, 0);
    octal(h + 116, 8, 0);
    octal(h + 124, 12, size);
    octal(h + 136, 12, 1700000000);
    std::memset(h + 148, ' ', 8);
    h[156] = dir ? '5' : '0';
    std::memcpy(h + 257, "ustar", 6);
    std::memcpy(h + 263, "00", 2);
    std::memcpy(h + 265, "root", 4);
    std::memcpy(h + 297, "root", 4);
    std::memcpy(h + 345, prefix.data(), prefix.size());
    unsigned sum = 0;
    for (unsigned char c : h) sum += c;
    std::snprintf(reinterpret_cast<char*>(h + 148), 8, "%06o", sum);
    h[155] = ' ';
    buf_.insert(buf_.end(), h, h + 512);
    if (size) {
      buf_.insert(buf_.end(), data, data + size);
      buf_.resize(buf_.size() + (512 - size % 512) % 512, 0);
    }
    if (buf_.size() >= kFlush) flush();
  }

  void finish() {
    buf_.resize(buf_.size() + 1024, 0);
    flush();
  }

 private:
  static constexpr std::size_t kFlush = 1 << 20;

  static void octal(unsigned char* field, int width, std::uint64_t v) {
    std::snprintf(reinterpret_cast<char*>(field), width, "%0*llo", width - 1,
                  static_cast<unsigned long long>(v));
  }

  void flush() {
    std::size_t done = 0;
    while (done < buf_.size()) {
      ssize_t n = ::write(1, buf_.data() + done, buf_.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        std::perror("dsfs-gentar: write");
        std::exit(1);
      }
      done += static_cast<std::size_t>(n);
    }
    buf_.clear();
  }

  std::vector<unsigned char> buf_;
};

int write_tar(const Options& o) {
  TarWriter w;
  std::vector<unsigned char> data;
  if (!o.prefix.empty()) w.entry(o.prefix + "/", true, nullptr, 0);
  for (std::uint64_t c = 0; c < o.classes; ++c) {
    std::string dir = class_dir(o, c);
    w.entry(dir + "/", true, nullptr, 0);
    for (std::uint64_t i = c; i < o.files; i += o.classes) {
      content(o, i, &data);
      w.entry(dir + "/" + file_name(i), false, data.data(), data.size());
    }
  }
  w.finish();
  return 0;
}

int write_tree(const Options& o) {
  std::vector<unsigned char> data;
  auto mk = [](const std::string& d) {
    if (::mkdir(d.c_str(), 0755) != 0 && errno != EEXIST) {
      std::fprintf(stderr, "dsfs-gentar: mkdir %s: %s\n", d.c_str(), std::strerror(errno));
      std::exit(1);
    }
  };
  mk(o.tree);
  if (!o.prefix.empty()) mk(o.tree + "/" + o.prefix);
  for (std::uint64_t c = 0; c < o.classes; ++c) {
    std::string dir = o.tree + "/" + class_dir(o, c);
    mk(dir);
    for (std::uint64_t i = c; i < o.files; i += o.classes) {
      std::string p = dir + "/" + file_name(i);
      int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd < 0) {
        std::fprintf(stderr, "dsfs-gentar: %s: %s\n", p.c_str(), std::strerror(errno));
        return 1;
      }
      if (!o.empty) {
        content(o, i, &data);
        if (::write(fd, data.data(), data.size()) != static_cast<ssize_t>(data.size())) {
          std::fprintf(stderr, "dsfs-gentar: write %s: %s\n", p.c_str(), std::strerror(errno));
          return 1;
        }
      }
      ::close(fd);
    }
  }
  return 0;
}

int write_list(const Options& o) {
  Rng r{o.list_seed * 0x9E3779B97F4A7C15ull + 1};
  for (std::uint64_t k = 0; k < o.list; ++k) {
    std::uint64_t i = r.next() % o.files;
    std::printf("%s/%s\n", class_dir(o, i % o.classes).c_str(), file_name(i).c_str());
  }
  return std::fflush(stdout) == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) usage(("missing value after " + a).c_str());
      return argv[++i];
    };
    if (a == "--files")
      o.files = number(value());
    else if (a == "--classes")
      o.classes = number(value());
    else if (a == "--seed")
      o.seed = number(value());
    else if (a == "--prefix")
      o.prefix = value();
    else if (a == "--tree")
      o.tree = value();
    else if (a == "--empty")
      o.empty = true;
    else if (a == "--list")
      o.list = number(value());
    else if (a == "--list-seed")
      o.list_seed = number(value());
    else if (a == "-h" || a == "--help")
      usage(nullptr);
    else
      usage(("unknown argument " + a).c_str());
  }
  if (o.files == 0 || o.classes == 0) usage("--files and --classes must be > 0");
  if (o.list) return write_list(o);
  if (!o.tree.empty()) return write_tree(o);
  if (::isatty(1)) usage("refusing to write a tar stream to a terminal");
  return write_tar(o);
}
