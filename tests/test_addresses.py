"""feather/addresses.py: the key every per-address limit counts a client under."""
import pytest

from feather.addresses import client_key

pytestmark = pytest.mark.once  # no database: the same answer on either pass


@pytest.mark.parametrize("addr, key", [
    ("192.0.2.1", "192.0.2.1"),
    ("192.0.2.2", "192.0.2.2"),
    (" 192.0.2.1\t", "192.0.2.1"),
    ("127.0.0.1", "127.0.0.1"),
])
def test_an_ipv4_address_is_its_own_key(addr, key):
    assert client_key(addr) == key


@pytest.mark.parametrize("addr", ["2001:db8:1:2::1", "2001:db8:1:2:ffff:ffff:ffff:ffff", "2001:0DB8:0001:0002::abcd",
                                  "2001:db8:1:2:a00:27ff:fe4e:66a1"])
def test_every_address_in_one_ipv6_64_has_the_64_as_its_key(addr):
    assert client_key(addr) == "2001:db8:1:2::/64"


@pytest.mark.parametrize("addr, key", [
    ("2001:db8:1:3::1", "2001:db8:1:3::/64"),
    ("2001:db8:1:1:ffff:ffff:ffff:ffff", "2001:db8:1:1::/64"),
    ("2001:db8:2:2::1", "2001:db8:2:2::/64"),
    ("::1", "::/64"),
    ("fe80::1%eth0", "fe80::/64"),
])
def test_the_neighbouring_64s_are_other_keys(addr, key):
    assert client_key(addr) == key


@pytest.mark.parametrize("addr", ["::ffff:192.0.2.1", "::FFFF:c000:0201", "[::ffff:192.0.2.1]:443"])
def test_an_ipv4_mapped_address_counts_as_its_ipv4_address(addr):
    assert client_key(addr) == "192.0.2.1"


@pytest.mark.parametrize("addr, key", [
    ("192.0.2.1:54321", "192.0.2.1"),
    ("192.0.2.1:1", "192.0.2.1"),
    ("[2001:db8:1:2::1]:443", "2001:db8:1:2::/64"),
    ("[2001:db8:1:2::1]", "2001:db8:1:2::/64"),
])
def test_a_port_a_proxy_wrote_beside_the_address_is_dropped(addr, key):
    assert client_key(addr) == key


@pytest.mark.parametrize("addr", [None, "", "   ", "unknown", "garbage", "192.0.2", "192.0.2.256", "01.2.3.4",
                                  "192.0.2.1:", "192.0.2.1:http", "192.0.2.1:123456", "192.0.2.1:²", "192.0.2.1:1:2",
                                  "[192.0.2.1]:80", "[2001:db8::1]x", "[2001:db8::1]:", "[2001:db8::1", "2001:db8::g",
                                  "192.0.2.1, 198.51.100.1", "example.com", "example.com:80"])
def test_anything_unparseable_counts_as_the_one_unknown_client(addr):
    assert client_key(addr) == "unknown"
