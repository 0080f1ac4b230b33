# The Debian package: `cpack -G DEB` in the build directory (after building) makes
# dsfs_<version>_<arch>.deb of what `cmake --install` installs, under /usr (the mount helper in
# /sbin, where mount(8) looks): the binary, the helper, the systemd units, the man pages, bash
# completion, the example config, NEWS.md and the licence (packaging/copyright, which points
# to Debian's /usr/share/common-licenses/Apache-2.0). Its Depends are computed from the
# binary's shared libraries by dpkg-shlibdeps (dpkg-dev), plus fuse3 (fusermount3, for
# mounts by users other than root): runtime libraries only, never what building or testing
# needs (tests/checks/package_test.sh checks both). `apt install ./dsfs_*.deb` installs it with them,
# `dpkg -r dsfs` removes it.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME dsfs)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR "the dsfs developers")
set(CPACK_PACKAGE_CONTACT "the dsfs developers <dsfs@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "read-only FUSE filesystem for machine-learning image datasets")
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION
    "Packs a tree of many small files (ImageFolder layout: root/<class>/<file>.jpg) into\n one compressed store and mounts it read-only as the same tree, served from RAM with\n readahead, with pre-decoded views of the images (BMP for unmodified scripts, .npy\n tensors). Stores live in LMDB, RocksDB or S3; a mount runs under systemd or fstab.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # dsfs_0.1.0_amd64.deb
set(CPACK_DEBIAN_PACKAGE_SECTION utils)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS fuse3)
set(CPACK_STRIP_FILES ON)  # the debugging symbols stay in the build directory
set(CPACK_PACKAGE_DIRECTORY ${CMAKE_BINARY_DIR}/package)
# The Python module (python/, DSFS_PYTHON) is a second binary package of the same run,
# python3-dsfs_VERSION_ARCH.deb: the dsfs package into Debian's Python path
# (/usr/lib/python3/dist-packages), for Debian 12's python3 (3.11, the ABI its extension is
# built for) and numpy; what it installs is the install() component "python", everything
# else is the dsfs package's as before.
if(DSFS_PYTHON)
  set(CPACK_DEB_COMPONENT_INSTALL ON)
  set(CPACK_COMPONENTS_ALL Unspecified python)
  set(CPACK_DEBIAN_UNSPECIFIED_PACKAGE_NAME dsfs)
  set(CPACK_DEBIAN_UNSPECIFIED_FILE_NAME DEB-DEFAULT)
  set(CPACK_DEBIAN_UNSPECIFIED_PACKAGE_DEPENDS fuse3)
  set(CPACK_DEBIAN_PYTHON_PACKAGE_NAME python3-dsfs)
  set(CPACK_DEBIAN_PYTHON_FILE_NAME DEB-DEFAULT)
  set(CPACK_DEBIAN_PYTHON_PACKAGE_SECTION python)
  set(CPACK_DEBIAN_PYTHON_PACKAGE_DEPENDS
      "python3 (>= ${Python_VERSION_MAJOR}.${Python_VERSION_MINOR}), python3 (<< ${Python_VERSION_MAJOR}.${DSFS_PYTHON_NEXT_MINOR}), python3-numpy")
  set(CPACK_DEBIAN_PYTHON_PACKAGE_RECOMMENDS "python3-torch, python3-torchvision, python3-pil")
  set(CPACK_DEBIAN_PYTHON_DESCRIPTION
      "Python module of dsfs: read a dsfs store without FUSE\n import dsfs: a dsfs store (LMDB, RocksDB or S3) read in the Python process, without\n a mount, FUSE or root: files, the decoded views, and torchvision-style ImageFolder\n datasets (dsfs.torch) for PyTorch DataLoaders.")
endif()
include(CPack)
