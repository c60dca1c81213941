#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <system_error>
#include <utility>

#include <mlframework/core/Error.hpp>
#include <mlframework/distributed/fsdp/ShardedCheckpoint.hpp>

namespace mlframework::distributed::fsdp {

namespace {

constexpr char kPrefix[] = "shard-";
constexpr char kSuffix[] = ".mlfw";

// The rank in a file name ShardedCheckpointFileName() makes, or -1 for any other name.
long RankOfFileName(const std::string& name) {
  const std::string prefix = kPrefix;
  const std::string suffix = kSuffix;
  if (name.size() <= prefix.size() + suffix.size() || name.compare(0, prefix.size(), prefix) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return -1;
  }
  const std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (digits.size() > 9 || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return -1;
  }
  return std::stol(digits);
}

}  // namespace

std::string ShardedCheckpointFileName(int rank) {
  if (rank < 0) throw ArgumentError("rank", "must be >= 0, got " + std::to_string(rank));
  std::string digits = std::to_string(rank);
  if (digits.size() < 5) digits.insert(0, 5 - digits.size(), '0');
  return kPrefix + digits + kSuffix;
}

void WriteCheckpointFile(const std::filesystem::path& path, std::span<const std::byte> blob) {
  std::filesystem::path temporary = path;
  temporary += ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(blob.data()), static_cast<std::streamsize>(blob.size()));
    out.close();
    if (!out) {
      throw ArgumentError("path", "cannot write checkpoint file '" + temporary.string() + "'");
    }
  }
  std::error_code error;
  std::filesystem::rename(temporary, path, error);
  if (error) {
    std::filesystem::remove(temporary, error);
    throw ArgumentError("path", "cannot rename '" + temporary.string() + "' to '" + path.string() + "'");
  }
}

std::vector<std::byte> ReadCheckpointFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw ArgumentError("path", "cannot open checkpoint file '" + path.string() + "'");
  const std::streamoff size = in.tellg();
  if (size < 0) throw ArgumentError("path", "cannot size checkpoint file '" + path.string() + "'");
  std::vector<std::byte> bytes(static_cast<std::size_t>(size));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(bytes.data()), size);
  if (!in) throw ArgumentError("path", "cannot read checkpoint file '" + path.string() + "'");
  return bytes;
}

std::vector<std::vector<std::byte>> ReadShardedCheckpointDirectory(const std::filesystem::path& directory) {
  std::error_code error;
  if (!std::filesystem::is_directory(directory, error)) {
    throw ArgumentError("directory", "'" + directory.string() + "' is not a checkpoint directory");
  }
  std::vector<std::pair<long, std::filesystem::path>> files;
  for (const auto& entry : std::filesystem::directory_iterator(directory, error)) {
    const long rank = RankOfFileName(entry.path().filename().string());
    if (rank >= 0 && entry.is_regular_file()) files.emplace_back(rank, entry.path());
  }
  if (error) throw ArgumentError("directory", "cannot list '" + directory.string() + "': " + error.message());
  if (files.empty()) {
    throw ArgumentError("directory", "'" + directory.string() + "' holds no " + kPrefix + "*" + kSuffix + " file");
  }
  std::sort(files.begin(), files.end());
  std::vector<std::vector<std::byte>> blobs;
  blobs.reserve(files.size());
  for (const auto& [rank, path] : files) {
    try {
      blobs.push_back(ReadCheckpointFile(path));
    } catch (const ArgumentError& failure) {
      throw ArgumentError("directory", failure.what());
    }
  }
  return blobs;
}

}  // namespace mlframework::distributed::fsdp
