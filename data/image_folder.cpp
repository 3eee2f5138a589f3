#include "data/image_folder.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <map>
#include <sys/stat.h>
#include <unistd.h>

#include "framework/core/error.h"

namespace vitddp {
namespace {

namespace fs = std::filesystem;

// torchvision.datasets.folder.IMG_EXTENSIONS.
bool has_image_extension(const std::string& name) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const char* ext : {".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp"}) {
    const size_t n = std::strlen(ext);
    if (lower.size() >= n && lower.compare(lower.size() - n, n, ext) == 0) return true;
  }
  return false;
}

// Every image file below `dir`, as torchvision's make_dataset walks it: folders in sorted path
// order (os.walk with followlinks, sorted), files sorted by name within each.
std::vector<std::string> image_files_below(const fs::path& dir) {
  std::map<std::string, std::vector<std::string>> by_folder;
  std::error_code ec;
  by_folder[dir.string()];
  for (auto it = fs::recursive_directory_iterator(dir, fs::directory_options::follow_directory_symlink, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    const fs::directory_entry& e = *it;
    std::error_code type_ec;
    if (e.is_directory(type_ec)) {
      by_folder[e.path().string()];
    } else if (has_image_extension(e.path().filename().string())) {
      by_folder[e.path().parent_path().string()].push_back(e.path().filename().string());
    }
  }
  VITDDP_CHECK(!ec, dir.string(), ": cannot list the folder (", ec.message(), ")");
  std::vector<std::string> out;
  for (auto& [folder, names] : by_folder) {
    std::sort(names.begin(), names.end());
    for (const std::string& n : names) out.push_back((fs::path(folder) / n).string());
  }
  return out;
}

}  // namespace

std::vector<uint8_t> read_sample_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw BadSample(std::string("cannot open (") + std::strerror(errno) + ")");
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    throw BadSample(std::string("cannot stat (") + std::strerror(errno) + ")");
  }
  std::vector<uint8_t> bytes(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t got = ::pread(fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      const int err = errno;
      ::close(fd);
      throw BadSample(got < 0 ? std::string("cannot read (") + std::strerror(err) + ")" : "shorter than its size");
    }
    done += static_cast<size_t>(got);
  }
  ::close(fd);
  return bytes;
}

ImageFolderDataset::ImageFolderDataset(const std::string& root, std::shared_ptr<const ImageTransform> transform,
                                       const std::vector<std::string>& classes)
    : root_(root), transform_(std::move(transform)) {
  std::error_code ec;
  VITDDP_CHECK(fs::is_directory(root, ec), root, ": no such folder");
  std::vector<std::string> folders;
  for (const fs::directory_entry& e : fs::directory_iterator(root, ec))
    if (std::error_code dir_ec; e.is_directory(dir_ec)) folders.push_back(e.path().filename().string());
  VITDDP_CHECK(!ec, root, ": cannot list the folder (", ec.message(), ")");
  std::sort(folders.begin(), folders.end());
  VITDDP_CHECK(!folders.empty(), root, ": no class folders (an image folder holds one folder of images per class, "
               "as torchvision's ImageFolder)");
  classes_ = classes.empty() ? folders : classes;
  std::map<std::string, int64_t> label_of_name;
  for (size_t k = 0; k < classes_.size(); ++k) label_of_name[classes_[k]] = static_cast<int64_t>(k);
  for (const std::string& folder : folders) {
    auto it = label_of_name.find(folder);
    VITDDP_CHECK(it != label_of_name.end(), root, ": class folder '", folder, "' is not a class of the training data");
    const std::vector<std::string> files = image_files_below(fs::path(root) / folder);
    VITDDP_CHECK(!files.empty(), root, ": class folder '", folder, "' holds no image file (.jpg, .jpeg, .png, ...)");
    for (const std::string& f : files) {
      files_.push_back(f);
      labels_.push_back(it->second);
    }
  }
}

void ImageFolderDataset::get(int64_t index, float* image_out, int64_t* label_out) const {
  get_drawn(index, 0, image_out, label_out);
}

void ImageFolderDataset::get_drawn(int64_t index, uint64_t draw, float* image_out, int64_t* label_out) const {
  VITDDP_CHECK(index >= 0 && index < size(), root_, ": index ", index, " out of range [0, ", size(), ")");
  const std::vector<uint8_t> bytes = read_sample_file(files_[static_cast<size_t>(index)]);
  transform_->apply(bytes.data(), bytes.size(), draw, image_out);
  *label_out = labels_[static_cast<size_t>(index)];
}

std::string ImageFolderDataset::sample_name(int64_t index) const {
  return index >= 0 && index < size() ? files_[static_cast<size_t>(index)] : Dataset::sample_name(index);
}

}  // namespace vitddp
