# cmake/package.cmake: the Debian package (cpack -G DEB, or
# contrib/package.sh).  Runtime dependencies come from dpkg-shlibdeps
# (the libraries the binaries link) plus fuse3 (fusermount3, mount.fuse3).
set(CPACK_GENERATOR "DEB")
set(CPACK_PACKAGE_NAME "memstorefs")
set(CPACK_PACKAGE_VERSION "${PROJECT_VERSION}")
set(CPACK_PACKAGE_CONTACT "memstorefs maintainers <memstorefs@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "memory stores as directories (FUSE), with a local API server")
set(CPACK_PACKAGE_DESCRIPTION
    "memstorefs mounts the memory stores of an agent's session as ordinary directories,\n"
    "backed by a local SQLite cache, and syncs edits back.  memstored is a local server\n"
    "of the Memory Stores API for trying memstorefs and for tests.")
set(CPACK_PACKAGING_INSTALL_PREFIX "/usr")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION "admin")
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "fuse3")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "man-db")
set(CPACK_STRIP_FILES ON)
include(CPack)
