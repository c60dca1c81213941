// The one translation unit that defines the Boost.Test module; every test
// file opens one suite (registered with CTest by name, see MlfwTesting.cmake).
#define BOOST_TEST_MODULE mlframework
#include <boost/test/unit_test.hpp>
