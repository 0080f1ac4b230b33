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
include(CPack)
