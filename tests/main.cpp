// The test binary's main: Catch2's session (v2's single header compiles its implementation here;
// v3's is in its library). tests/support/catch.h says which version is in use.
#if __has_include(<catch2/catch_all.hpp>)
#include <catch2/catch_session.hpp>
#else
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#endif

int main(int argc, char** argv) { return Catch::Session().run(argc, argv); }
