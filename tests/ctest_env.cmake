# Included by ctest (TEST_INCLUDE_FILES, tests/CMakeLists.txt) before it runs any test: the
# environment every test inherits. No test may reach EC2 instance metadata at 169.254.169.254.
set(ENV{AWS_EC2_METADATA_DISABLED} true)
