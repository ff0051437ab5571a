/*
 * test_host.cpp — checks the host emulation of srtp.cu (host_shim.cpp)
 * against an independent reference built on OpenSSL EVP/HMAC.
 *
 *   usage: test_host [batches=40] [seed=1]
 *
 * The ABI structs are declared here independently (as the Rust side does)
 * and compared with the shim's sizes at run time and with the specified
 * offsets at compile time.
 *
 * Every batch: 16 random key sets of random profiles in random slots, then
 * ~1000 packets of mixed profiles and operations, SRTP and SRTCP, in one
 * launch. The whole data buffer (gaps between packets filled with random
 * bytes) is compared with the expected buffer, and every status with the
 * expected status.
 */
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

/* ---------------------------------------------------------------------- */
/* ABI (independent copy of the specification)                            */
/* ---------------------------------------------------------------------- */
struct RawKeys {
  uint8_t enc[32];
  uint8_t auth[20];
  uint8_t salt[14];
  uint8_t enc_len;
  uint8_t kind;
  uint8_t pad[12];
};
struct PacketDesc {
  uint32_t offset;
  uint32_t slot;
  uint16_t len;
  uint16_t hdr;
  uint8_t op;
  uint8_t tag_len;
  uint8_t status;
  uint8_t pad0;
  uint32_t ssrc;
  uint32_t roc;
  uint16_t seq;
  uint16_t pad1;
  uint32_t pad2;
};
static_assert(sizeof(RawKeys) == 80 && offsetof(RawKeys, salt) == 52 && offsetof(RawKeys, enc_len) == 66, "RawKeys");
static_assert(sizeof(PacketDesc) == 32 && offsetof(PacketDesc, op) == 12 && offsetof(PacketDesc, status) == 14 &&
                  offsetof(PacketDesc, ssrc) == 16 && offsetof(PacketDesc, roc) == 20 && offsetof(PacketDesc, seq) == 24,
              "PacketDesc");

extern "C" {
void srtp_host_tables_init(uint32_t* tables);
void srtp_host_keys_setup(const uint32_t* tables, const RawKeys* raw, const uint32_t* slot_ids, uint32_t n, uint8_t* slots);
void srtp_host_packets(const uint32_t* tables, const uint8_t* slots, PacketDesc* descs, uint32_t n, uint8_t* data);
void srtp_host_packets_launch(uint32_t grid, uint32_t block, const uint32_t* tables, const uint8_t* slots, PacketDesc* descs,
                              uint32_t n, uint8_t* data);
uint32_t srtp_host_abi(uint32_t which);
}

typedef std::vector<uint8_t> Bytes;

/* ---------------------------------------------------------------------- */
/* Utilities                                                              */
/* ---------------------------------------------------------------------- */
static uint64_t g_rng = 1;
static uint64_t rnd64() { /* splitmix64 */
  uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static uint32_t rnd32() { return (uint32_t)rnd64(); }
static uint32_t rnd_below(uint32_t n) { return n ? (uint32_t)(rnd64() % n) : 0; }
static void rnd_fill(uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i) p[i] = (uint8_t)rnd64();
}

static int g_failures = 0;
static int g_checks = 0;
#define CHECK(cond, ...)                                  \
  do {                                                    \
    ++g_checks;                                           \
    if (!(cond)) {                                        \
      if (++g_failures <= 30) {                           \
        std::printf("FAIL %s:%d: ", __FILE__, __LINE__); \
        std::printf(__VA_ARGS__);                         \
        std::printf("\n");                                \
      }                                                   \
    }                                                     \
  } while (0)

static Bytes from_hex(const char* h) {
  Bytes b;
  for (size_t i = 0; h[i] && h[i + 1]; i += 2) {
    unsigned v;
    std::sscanf(h + i, "%2x", &v);
    b.push_back((uint8_t)v);
  }
  return b;
}
static std::string to_hex(const uint8_t* p, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s += d[p[i] >> 4];
    s += d[p[i] & 15];
  }
  return s;
}
static void put_be32(uint8_t* p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24);
  p[1] = (uint8_t)(v >> 16);
  p[2] = (uint8_t)(v >> 8);
  p[3] = (uint8_t)v;
}
static void put_be16(uint8_t* p, uint16_t v) {
  p[0] = (uint8_t)(v >> 8);
  p[1] = (uint8_t)v;
}
static size_t align16(size_t x) { return (x + 15) & ~(size_t)15; }

/* ---------------------------------------------------------------------- */
/* Profiles and the OpenSSL reference                                     */
/* ---------------------------------------------------------------------- */
struct Profile {
  const char* name;
  uint8_t kind, enc_len, tag_len;
};
static const Profile kProfiles[] = {
    {"AES128-CM/HMAC-SHA1-80", 0, 16, 10}, {"AES128-CM/HMAC-SHA1-32", 0, 16, 4}, {"AES256-CM/HMAC-SHA1-80", 0, 32, 10},
    {"AES256-CM/HMAC-SHA1-32", 0, 32, 4},  {"NULL/HMAC-SHA1-80", 0, 0, 10},      {"NULL/HMAC-SHA1-32", 0, 0, 4},
    {"AEAD-AES128-GCM", 1, 16, 16},        {"AEAD-AES256-GCM", 1, 32, 16},
};
static const int kNumProfiles = sizeof(kProfiles) / sizeof(kProfiles[0]);

/* Kernel-independent SRTP protect: returns the SRTP packet (len + tag). */
static Bytes ref_protect(const RawKeys& k, uint8_t tag_len, const uint8_t* rtp, size_t len, size_t hdr, uint32_t ssrc,
                         uint32_t roc, uint16_t seq) {
  Bytes out(rtp, rtp + len);
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  int ol = 0;
  if (k.kind == 0) {
    if (k.enc_len) {
      uint8_t iv[16] = {0};
      std::memcpy(iv, k.salt, 14); /* salt << 16 */
      uint8_t t[4];
      put_be32(t, ssrc);
      for (int i = 0; i < 4; ++i) iv[4 + i] ^= t[i]; /* ssrc << 64 */
      put_be32(t, roc);
      for (int i = 0; i < 4; ++i) iv[8 + i] ^= t[i]; /* index << 16 */
      iv[12] ^= (uint8_t)(seq >> 8);
      iv[13] ^= (uint8_t)seq;
      EVP_EncryptInit_ex(ctx, k.enc_len == 16 ? EVP_aes_128_ctr() : EVP_aes_256_ctr(), nullptr, k.enc, iv);
      if (len > hdr) EVP_EncryptUpdate(ctx, out.data() + hdr, &ol, out.data() + hdr, (int)(len - hdr));
    }
    Bytes msg = out;
    msg.resize(len + 4);
    put_be32(msg.data() + len, roc);
    uint8_t mac[20];
    unsigned ml = 0;
    HMAC(EVP_sha1(), k.auth, 20, msg.data(), msg.size(), mac, &ml);
    out.insert(out.end(), mac, mac + tag_len);
  } else {
    uint8_t iv[12];
    std::memcpy(iv, k.salt, 12);
    uint8_t x[12] = {0, 0}; /* 00 00 || ssrc || roc || seq */
    put_be32(x + 2, ssrc);
    put_be32(x + 6, roc);
    put_be16(x + 10, seq);
    for (int i = 0; i < 12; ++i) iv[i] ^= x[i];
    EVP_EncryptInit_ex(ctx, k.enc_len == 16 ? EVP_aes_128_gcm() : EVP_aes_256_gcm(), nullptr, nullptr, nullptr);
    EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_IVLEN, 12, nullptr);
    EVP_EncryptInit_ex(ctx, nullptr, nullptr, k.enc, iv);
    if (hdr) EVP_EncryptUpdate(ctx, nullptr, &ol, out.data(), (int)hdr);
    if (len > hdr) EVP_EncryptUpdate(ctx, out.data() + hdr, &ol, out.data() + hdr, (int)(len - hdr));
    EVP_EncryptFinal_ex(ctx, out.data() + len, &ol);
    uint8_t tag[16];
    EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, 16, tag);
    out.insert(out.end(), tag, tag + 16);
  }
  EVP_CIPHER_CTX_free(ctx);
  return out;
}

/* Kernel-independent SRTCP protect (RFC 3711 §3.4 / RFC 7714 §9), written
 * from the formulas of the ABI: returns the SRTCP packet.
 *   kind 0: [rtcp (encrypted from byte 8 if E)][E||index][tag_len bytes of
 *           HMAC-SHA1 over everything before]
 *   kind 1: [rtcp (encrypted from byte 8 if E)][16-byte tag][E||index]
 *           AAD = rtcp[0..8) || E||index (E set) or rtcp || E||index (E clear) */
static Bytes ref_srtcp_protect(const RawKeys& k, uint8_t tag_len, const uint8_t* rtcp, size_t len, uint32_t ssrc,
                               uint32_t trailer) {
  Bytes out(rtcp, rtcp + len);
  const uint32_t index = trailer & 0x7fffffffu;
  const bool e = (trailer >> 31) != 0;
  uint8_t tb[4];
  put_be32(tb, trailer);
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  int ol = 0;
  if (k.kind == 0) {
    if (e && k.enc_len) {
      uint8_t iv[16] = {0};
      std::memcpy(iv, k.salt, 14); /* salt << 16 */
      uint8_t t[4];
      put_be32(t, ssrc);
      for (int i = 0; i < 4; ++i) iv[4 + i] ^= t[i]; /* ssrc << 64 */
      put_be32(t, index);
      for (int i = 0; i < 4; ++i) iv[10 + i] ^= t[i]; /* index << 16 */
      EVP_EncryptInit_ex(ctx, k.enc_len == 16 ? EVP_aes_128_ctr() : EVP_aes_256_ctr(), nullptr, k.enc, iv);
      if (len > 8) EVP_EncryptUpdate(ctx, out.data() + 8, &ol, out.data() + 8, (int)(len - 8));
    }
    out.insert(out.end(), tb, tb + 4);
    uint8_t mac[20];
    unsigned ml = 0;
    HMAC(EVP_sha1(), k.auth, 20, out.data(), out.size(), mac, &ml);
    out.insert(out.end(), mac, mac + tag_len);
  } else {
    uint8_t iv[12];
    std::memcpy(iv, k.salt, 12);
    uint8_t x[12] = {0}; /* 00 00 || ssrc || 00 00 || index */
    put_be32(x + 2, ssrc);
    put_be32(x + 8, index);
    for (int i = 0; i < 12; ++i) iv[i] ^= x[i];
    EVP_EncryptInit_ex(ctx, k.enc_len == 16 ? EVP_aes_128_gcm() : EVP_aes_256_gcm(), nullptr, nullptr, nullptr);
    EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_IVLEN, 12, nullptr);
    EVP_EncryptInit_ex(ctx, nullptr, nullptr, k.enc, iv);
    Bytes aad(out.begin(), out.begin() + (e ? 8 : len));
    aad.insert(aad.end(), tb, tb + 4);
    EVP_EncryptUpdate(ctx, nullptr, &ol, aad.data(), (int)aad.size());
    if (e && len > 8) EVP_EncryptUpdate(ctx, out.data() + 8, &ol, out.data() + 8, (int)(len - 8));
    uint8_t tag[16];
    EVP_EncryptFinal_ex(ctx, tag, &ol);
    EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, 16, tag);
    out.insert(out.end(), tag, tag + 16);
    out.insert(out.end(), tb, tb + 4);
  }
  EVP_CIPHER_CTX_free(ctx);
  return out;
}

/* RFC 3711 §4.3 key derivation with key_derivation_rate 0 (index DIV kdr =
 * 0): x = master_salt ^ (label << 48), keystream of AES-CM(master_key, x << 16). */
static void ref_kdf(const Bytes& master_key, const Bytes& master_salt, uint8_t label, uint8_t* out, size_t n) {
  uint8_t iv[16] = {0};
  std::memcpy(iv, master_salt.data(), 14);
  iv[7] ^= label;
  std::vector<uint8_t> zero(n, 0);
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  int ol = 0;
  EVP_EncryptInit_ex(ctx, master_key.size() == 16 ? EVP_aes_128_ctr() : EVP_aes_256_ctr(), nullptr, master_key.data(), iv);
  EVP_EncryptUpdate(ctx, out, &ol, zero.data(), (int)n);
  EVP_CIPHER_CTX_free(ctx);
}

/* ---------------------------------------------------------------------- */
/* Device emulation state                                                 */
/* ---------------------------------------------------------------------- */
static const uint32_t kSlots = 64;
static std::vector<uint32_t> g_tables;
static Bytes g_slots;

static void setup_keys(const std::vector<RawKeys>& raw, const std::vector<uint32_t>& ids) {
  srtp_host_keys_setup(g_tables.data(), raw.data(), ids.data(), (uint32_t)raw.size(), g_slots.data());
}

/* Single-packet helper for the known-answer tests: returns the status and
 * leaves the result in buf (packet at offset 16). */
static uint8_t run_one(uint32_t slot, Bytes& buf, uint16_t len, uint16_t hdr, uint8_t op, uint8_t tag_len, uint32_t ssrc,
                       uint32_t roc, uint16_t seq) {
  PacketDesc d;
  std::memset(&d, 0, sizeof d);
  d.offset = 16;
  d.slot = slot;
  d.len = len;
  d.hdr = hdr;
  d.op = op;
  d.tag_len = tag_len;
  d.ssrc = ssrc;
  d.roc = roc;
  d.seq = seq;
  srtp_host_packets(g_tables.data(), g_slots.data(), &d, 1, buf.data());
  return d.status;
}

/* ---------------------------------------------------------------------- */
/* Deterministic tests                                                    */
/* ---------------------------------------------------------------------- */
static void test_abi_and_tables() {
  CHECK(srtp_host_abi(0) == g_tables.size(), "SRTP_TABLE_WORDS %u", srtp_host_abi(0));
  CHECK(srtp_host_abi(1) == 1024, "SRTP_KEY_SLOT_BYTES %u", srtp_host_abi(1));
  CHECK(srtp_host_abi(2) == sizeof(PacketDesc), "sizeof(PacketDesc) %u", srtp_host_abi(2));
  CHECK(srtp_host_abi(3) == sizeof(RawKeys), "sizeof(RawKeys) %u", srtp_host_abi(3));
  /* well-known T-table / S-box entries */
  CHECK(g_tables[0] == 0xc66363a5u, "Te0[0] = %08x", g_tables[0]);
  CHECK(g_tables[256 + 0] == 0xa5c66363u, "Te1[0] = %08x", g_tables[256]);
  CHECK(((g_tables[0x53] >> 8) & 0xff) == 0xed, "S[0x53]");
  CHECK(((g_tables[0xff] >> 8) & 0xff) == 0x16, "S[0xff]");
  CHECK(g_tables[1024 + 1] == 0x1c20 && g_tables[1024 + 8] == 0xe100 && g_tables[1024 + 15] == 0xb5e0, "GHASH rem table");
}

/* RFC 3711 Appendix B.2: AES-CM keystream with SSRC = index = 0. */
static void test_rfc3711_b2() {
  RawKeys k;
  std::memset(&k, 0, sizeof k);
  Bytes key = from_hex("2B7E151628AED2A6ABF7158809CF4F3C"), salt = from_hex("F0F1F2F3F4F5F6F7F8F9FAFBFCFD");
  std::memcpy(k.enc, key.data(), 16);
  std::memcpy(k.salt, salt.data(), 14);
  k.enc_len = 16;
  k.kind = 0;
  setup_keys({k}, {5});
  Bytes buf(16 + 12 + 48 + 32, 0); /* header 12 zero bytes, 48 zero payload bytes */
  uint8_t st = run_one(5, buf, 12 + 48, 12, 0, 10, 0, 0, 0);
  CHECK(st == 1, "B.2 status %u", st);
  Bytes expect = from_hex(
      "E03EAD0935C95E80E166B16DD92B4EB4"
      "D23513162B02D0F72A43A2FE4A5F97AB"
      "41E95B3BB0A2E8DD477901E4FCA894C0");
  CHECK(std::memcmp(buf.data() + 16 + 12, expect.data(), 48) == 0, "RFC 3711 B.2 keystream: got %s",
        to_hex(buf.data() + 28, 48).c_str());
}

/* RFC 2202 test case 1 through the SRTP MAC: data "Hi T" || roc "here". */
static void test_hmac_kat() {
  RawKeys k;
  std::memset(&k, 0, sizeof k);
  std::memset(k.auth, 0x0b, 20);
  k.enc_len = 0;
  k.kind = 0;
  setup_keys({k}, {6});
  Bytes buf(16 + 4 + 32, 0);
  std::memcpy(buf.data() + 16, "Hi T", 4);
  uint8_t st = run_one(6, buf, 4, 4, 0, 16, 0, 0x68657265u /* "here" */, 0);
  CHECK(st == 1, "HMAC KAT status");
  Bytes expect = from_hex("b617318655057264e28bc0b6fb378c8e"); /* first 16 of b6173186...f146be00 */
  CHECK(std::memcmp(buf.data() + 20, expect.data(), 16) == 0, "RFC 2202 #1 via SRTP MAC: got %s",
        to_hex(buf.data() + 20, 16).c_str());
}

/* GCM spec (McGrew & Viega) test case 4 as an SRTP-GCM packet: IV = salt
 * (ssrc = roc = seq = 0), AAD = 20-byte "header", 60-byte payload. */
static void test_gcm_kat() {
  RawKeys k;
  std::memset(&k, 0, sizeof k);
  Bytes key = from_hex("feffe9928665731c6d6a8f9467308308"), iv = from_hex("cafebabefacedbaddecaf888");
  std::memcpy(k.enc, key.data(), 16);
  std::memcpy(k.salt, iv.data(), 12);
  k.enc_len = 16;
  k.kind = 1;
  setup_keys({k}, {7});
  Bytes aad = from_hex("feedfacedeadbeeffeedfacedeadbeefabaddad2");
  Bytes pt = from_hex(
      "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a72"
      "1c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b39");
  Bytes ct = from_hex(
      "42831ec2217774244b7221b784d0d49ce3aa212f2c02a4e035c17e2329aca12e"
      "21d514b25466931c7d8f6a5aac84aa051ba30b396a0aac973d58e091"
      "5bc94fbc3221a5db94fae95ae7121a47");
  Bytes rtp = aad;
  rtp.insert(rtp.end(), pt.begin(), pt.end());
  /* the vector must agree with OpenSSL too (guards against a mistyped vector) */
  Bytes ref = ref_protect(k, 16, rtp.data(), rtp.size(), 20, 0, 0, 0);
  CHECK(Bytes(ref.begin() + 20, ref.end()) == ct, "GCM test case 4 vs OpenSSL: %s", to_hex(ref.data() + 20, 76).c_str());
  Bytes buf(16 + 80 + 32, 0);
  std::memcpy(buf.data() + 16, rtp.data(), 80);
  uint8_t st = run_one(7, buf, 80, 20, 0, 16, 0, 0, 0);
  CHECK(st == 1 && std::memcmp(buf.data() + 36, ct.data(), 76) == 0, "GCM test case 4: got %s",
        to_hex(buf.data() + 36, 76).c_str());
  st = run_one(7, buf, 96, 20, 1, 16, 0, 0, 0);
  CHECK(st == 1 && std::memcmp(buf.data() + 36, pt.data(), 60) == 0, "GCM test case 4 decrypt");
}

/* SRTCP with AES-128-CM + HMAC-SHA1-80: libSRTP's srtp_validate() vector
 * (test/srtp_driver.c: master key e1f97a0d.., SSRC 0xcafebabe, SRTCP index 1
 * with E set). The session keys come from the RFC 3711 KDF computed here with
 * OpenSSL; the KDF itself is checked against RFC 3711 B.3 and against the
 * SRTP packet of the same libSRTP test. */
static void test_srtcp_hmac_kat() {
  const Bytes mk = from_hex("e1f97a0d3e018be0d64fa32c06de4139"), ms = from_hex("0ec675ad498afeebb6960b3aabe6");
  uint8_t t[20];
  ref_kdf(mk, ms, 0, t, 16);
  CHECK(to_hex(t, 16) == "c61e7a93744f39ee10734afe3ff7a087", "RFC 3711 B.3 cipher key: %s", to_hex(t, 16).c_str());
  ref_kdf(mk, ms, 2, t, 14);
  CHECK(to_hex(t, 14) == "30cbbc08863d8c85d49db34a9ae1", "RFC 3711 B.3 salt: %s", to_hex(t, 14).c_str());
  ref_kdf(mk, ms, 1, t, 20);
  CHECK(to_hex(t, 16) == "cebe321f6ff7716b6fd4ab49af256a15", "RFC 3711 B.3 auth key: %s", to_hex(t, 16).c_str());

  RawKeys rtp, rtcp;
  std::memset(&rtp, 0, sizeof rtp);
  rtp.enc_len = 16;
  rtp.kind = 0;
  rtcp = rtp;
  ref_kdf(mk, ms, 0, rtp.enc, 16);
  ref_kdf(mk, ms, 1, rtp.auth, 20);
  ref_kdf(mk, ms, 2, rtp.salt, 14);
  ref_kdf(mk, ms, 3, rtcp.enc, 16);
  ref_kdf(mk, ms, 4, rtcp.auth, 20);
  ref_kdf(mk, ms, 5, rtcp.salt, 14);
  setup_keys({rtp, rtcp}, {20, 21});

  /* SRTP packet of the same test (checks the derived keys) */
  const Bytes rtp_pt = from_hex("800f1234decafbadcafebabe" "abababababababababababababababab");
  const Bytes srtp_ct = from_hex("800f1234decafbadcafebabe4e55dc4ce79978d88ca4d215949d2402b78d6acc99ea179b8dbb");
  Bytes buf(16 + 64, 0);
  std::memcpy(buf.data() + 16, rtp_pt.data(), rtp_pt.size());
  uint8_t st = run_one(20, buf, 28, 12, 0, 10, 0xcafebabe, 0, 0x1234);
  CHECK(st == 1 && std::memcmp(buf.data() + 16, srtp_ct.data(), 38) == 0, "libSRTP SRTP vector: status %u, got %s", st,
        to_hex(buf.data() + 16, 38).c_str());

  const Bytes rtcp_pt = from_hex("81c8000bcafebabe" "abababababababababababababababab");
  const Bytes srtcp_ct = from_hex("81c8000bcafebabe7128035be487b9bdbef89041f977a5a880000001993e08cd54d6c1230798");
  CHECK(ref_srtcp_protect(rtcp, 10, rtcp_pt.data(), 24, 0xcafebabe, 0x80000001u) == srtcp_ct, "reference vs libSRTP SRTCP vector");
  std::fill(buf.begin(), buf.end(), 0x5a);
  std::memcpy(buf.data() + 16, rtcp_pt.data(), rtcp_pt.size());
  st = run_one(21, buf, 24, 8, 2, 10, 0xcafebabe, 0x80000001u, 0);
  CHECK(st == 1 && std::memcmp(buf.data() + 16, srtcp_ct.data(), 38) == 0, "libSRTP SRTCP vector protect: status %u, got %s", st,
        to_hex(buf.data() + 16, 38).c_str());
  st = run_one(21, buf, 38, 8, 3, 10, 0xcafebabe, 0x80000001u, 0);
  CHECK(st == 1 && std::memcmp(buf.data() + 16, rtcp_pt.data(), 24) == 0 && std::memcmp(buf.data() + 40, srtcp_ct.data() + 24, 14) == 0,
        "libSRTP SRTCP vector unprotect: status %u", st);
}

/* RFC 7714 §17 SRTCP test vectors (session key and salt given directly):
 * AES-128/256-GCM, SSRC "Mars", SRTCP index 0x5d4, E set (encrypted) and E
 * clear (authentication only). Protect and unprotect, and the reference. */
static void test_srtcp_gcm_kat() {
  const Bytes salt = from_hex("517569642070726f2071756f");
  const Bytes rtcp_pt = from_hex(
      "81c8000d4d6172734e5450314e545032525450200000042a0000e9304c756e61"
      "deadbeefdeadbeefdeadbeefdeadbeefdeadbeef");
  struct {
    const char* name;
    int enc_len;
    uint32_t trailer;
    const char* srtcp;
  } v[] = {
      {"17.1 AES-128-GCM encrypted", 16, 0x800005d4u,
       "81c8000d4d61727363e94885dcdab67ca727d7662f6b7e997ff5c0f76c06f32dc676a5f1730d6fda4ce09b4686303ded"
       "0bb9275bc84aa45896cf4d2fc5abf87245d9eade800005d4"},
      {"17.2 AES-256-GCM encrypted", 32, 0x800005d4u,
       "81c8000d4d617273d50ae4d1f5ce5d304ba297e47d470c282c3ece5dbffe0a50a2eaa5c1110555be8415f658c61de047"
       "6f1b6fad1d1eb30c4446839f57ff6f6cb26ac3be800005d4"},
      {"17.3 AES-128-GCM authentication only", 16, 0x000005d4u,
       "81c8000d4d6172734e5450314e545032525450200000042a0000e9304c756e61deadbeefdeadbeefdeadbeefdeadbeef"
       "deadbeef841dd9683dd78ec92ae58790125f62b3000005d4"},
      {"17.4 AES-256-GCM authentication only", 32, 0x000005d4u,
       "81c8000d4d6172734e5450314e545032525450200000042a0000e9304c756e61deadbeefdeadbeefdeadbeefdeadbeef"
       "deadbeef91db4afbfeee5a978fab4393ed2615fe000005d4"},
  };
  for (auto& t : v) {
    RawKeys k;
    std::memset(&k, 0, sizeof k);
    for (int i = 0; i < 32; ++i) k.enc[i] = (uint8_t)i;
    std::memcpy(k.salt, salt.data(), 12);
    k.enc_len = (uint8_t)t.enc_len;
    k.kind = 1;
    setup_keys({k}, {22});
    const Bytes want = from_hex(t.srtcp);
    CHECK(ref_srtcp_protect(k, 16, rtcp_pt.data(), rtcp_pt.size(), 0x4d617273, t.trailer) == want, "RFC 7714 %s: reference",
          t.name);
    Bytes buf(16 + 128, 0xc3);
    std::memcpy(buf.data() + 16, rtcp_pt.data(), rtcp_pt.size());
    uint8_t st = run_one(22, buf, (uint16_t)rtcp_pt.size(), 8, 2, 16, 0x4d617273, t.trailer, 0);
    CHECK(st == 1 && std::memcmp(buf.data() + 16, want.data(), want.size()) == 0, "RFC 7714 %s protect: status %u, got %s", t.name,
          st, to_hex(buf.data() + 16, want.size()).c_str());
    std::memcpy(buf.data() + 16, want.data(), want.size());
    st = run_one(22, buf, (uint16_t)want.size(), 8, 3, 16, 0x4d617273, t.trailer, 0);
    CHECK(st == 1 && std::memcmp(buf.data() + 16, rtcp_pt.data(), rtcp_pt.size()) == 0 &&
              std::memcmp(buf.data() + 16 + rtcp_pt.size(), want.data() + rtcp_pt.size(), 20) == 0,
          "RFC 7714 %s unprotect: status %u", t.name, st);
  }
}

/* Inputs the host promises never to send must give status 3 and leave the
 * buffer alone; so must a slot made from unusable RawKeys. */
static void test_rejections() {
  std::vector<RawKeys> raw(3);
  for (auto& r : raw) rnd_fill((uint8_t*)&r, sizeof r);
  raw[0].enc_len = 24, raw[0].kind = 0; /* bad key length */
  raw[1].enc_len = 16, raw[1].kind = 2; /* bad kind */
  raw[2].enc_len = 0, raw[2].kind = 1;  /* GCM without a cipher */
  setup_keys(raw, {8, 9, 10});
  RawKeys good;
  rnd_fill((uint8_t*)&good, sizeof good);
  good.enc_len = 16, good.kind = 0;
  RawKeys goodg = good;
  goodg.kind = 1;
  RawKeys goodn = good;
  goodn.enc_len = 0;
  setup_keys({good, goodg, goodn}, {11, 12, 13});
  const uint32_t E = 0x80000000u;
  struct {
    uint32_t slot;
    uint16_t len, hdr;
    uint8_t op, tag;
    uint32_t roc;
    int trailer_at; /* SRTCP unprotect: where the packet's trailer is (written as roc ^ 0x100), or -1 */
  } bad[] = {
      {8, 100, 12, 0, 10, 2, -1},  {9, 100, 12, 0, 10, 2, -1},  {10, 100, 12, 0, 16, 2, -1}, /* bad slots */
      {11, 100, 101, 0, 10, 2, -1},                                                   /* hdr > len */
      {11, 100, 12, 4, 10, 2, -1}, {11, 100, 8, 255, 10, 2, -1},                       /* bad op */
      {11, 100, 12, 0, 0, 2, -1},  {11, 100, 12, 0, 17, 2, -1},                        /* bad HMAC tag lengths */
      {11, 21, 12, 1, 10, 2, -1},                                                     /* unprotect: len < hdr + tag */
      {12, 100, 12, 0, 10, 2, -1}, {12, 100, 12, 1, 12, 2, -1},                        /* GCM tag != 16 */
      {12, 27, 12, 1, 16, 2, -1},                                                     /* unprotect too short */
      /* SRTCP */
      {11, 100, 12, 2, 10, E | 2, -1}, {11, 100, 0, 3, 10, E | 2, -1}, /* hdr != 8 */
      {12, 100, 9, 2, 16, E | 2, -1},  {12, 100, 4, 3, 16, E | 2, -1},
      {11, 7, 8, 2, 10, E | 2, -1},                                     /* len < hdr */
      {11, 100, 8, 2, 3, E | 2, -1},   {11, 100, 8, 2, 17, E | 2, -1},  /* HMAC tag lengths 4..16 only */
      {11, 100, 8, 3, 3, E | 2, -1},   {11, 100, 8, 3, 0, E | 2, -1},
      {12, 100, 8, 2, 10, E | 2, -1},  {12, 100, 8, 3, 4, E | 2, -1},   /* GCM tag != 16 */
      {11, 21, 8, 3, 10, E | 2, -1},   {12, 27, 8, 3, 16, E | 2, -1},   /* unprotect: len < 8 + 4 + tag */
      {13, 100, 8, 2, 10, E | 2, -1},  {13, 8, 8, 2, 10, E, -1},        /* E set with the NULL cipher */
      {11, 100, 8, 3, 10, E | 2, 86},  {11, 100, 8, 3, 10, 2, 86},      /* trailer word != descriptor */
      {11, 101, 8, 3, 16, E | 7, 81},  {13, 22, 8, 3, 10, 5, 8},
      {12, 100, 8, 3, 16, E | 2, 96},  {12, 100, 8, 3, 16, 2, 96},  {12, 29, 8, 3, 16, 9, 25},
  };
  for (auto& b : bad) {
    Bytes buf(16 + 200 + 32);
    rnd_fill(buf.data(), buf.size());
    if (b.trailer_at >= 0) put_be32(buf.data() + 16 + b.trailer_at, b.roc ^ 0x100u);
    Bytes before = buf;
    uint8_t st = run_one(b.slot, buf, b.len, b.hdr, b.op, b.tag, 1, b.roc, 3);
    CHECK(st == 3 && buf == before, "rejection slot %u len %u hdr %u op %u tag %u: status %u", b.slot, b.len, b.hdr, b.op,
          b.tag, st);
    if (b.trailer_at >= 0) {
      /* control: with the matching trailer the same packet is authenticated
         (and fails: random bytes), so the 3 above came from the mismatch */
      put_be32(buf.data() + 16 + b.trailer_at, b.roc);
      before = buf;
      st = run_one(b.slot, buf, b.len, b.hdr, b.op, b.tag, 1, b.roc, 3);
      CHECK(st == 2 && buf == before, "trailer control slot %u len %u: status %u", b.slot, b.len, st);
    }
  }
}

/* ---------------------------------------------------------------------- */
/* Random batches                                                         */
/* ---------------------------------------------------------------------- */
enum Scenario { PROTECT, UNPROTECT, TAMPER, WRONG_CTX, NSCEN };
static const char* kScenarioName[NSCEN] = {"protect", "unprotect", "tamper", "wrong ctx"};
static long g_count[kNumProfiles][NSCEN];
static long g_rcount[kNumProfiles][2][NSCEN]; /* SRTCP, by profile and E */
static long g_misaligned = 0, g_zero_payload = 0, g_rtcp_unaligned = 0, g_rtcp_empty = 0;

struct KeyEntry {
  RawKeys raw;
  int prof;
  uint32_t slot;
};

struct Case {
  int prof, scen;
  uint32_t slot;
  uint8_t tag_len;
  size_t hdr, rtp_len;
  uint32_t ssrc, roc; /* SRTCP: roc = the trailer word E || index */
  uint16_t seq;
  Bytes rtp, srtp;   /* plaintext RTP (RTCP) packet and the reference SRTP (SRTCP) packet */
  uint8_t expect_st; /* expected status */
  bool rtcp;         /* SRTCP case (ops 2/3) */
  int wrong;         /* SRTCP wrong context: 0 = descriptor word != packet trailer, 1 = SSRC (GCM) */
};

static uint32_t pick_roc() {
  switch (rnd_below(8)) {
    case 0: return 0;
    case 1: return 1;
    case 2: return 0xffffu;
    case 3: return 0x10000u;
    case 4: return 0x7fffffffu;
    case 5: return 0xffffffffu;
    case 6: return rnd_below(1000);
    default: return rnd32();
  }
}

static uint32_t pick_index() {
  switch (rnd_below(8)) {
    case 0: return 0;
    case 1: return 1;
    case 2: return 0xffffu;
    case 3: return 0x10000u;
    case 4: return 0x7fffffffu;
    case 5: return 0x7ffffffeu;
    case 6: return rnd_below(1000);
    default: return rnd32() & 0x7fffffffu;
  }
}

/* An SRTCP case: a compound-RTCP-like packet of 8..1500 bytes. */
static void make_rtcp_case(Case& c, const KeyEntry& k) {
  const Profile& pr = kProfiles[k.prof];
  c.rtcp = true;
  c.hdr = 8;
  c.seq = 0;
  /* SRTCP tags: 10 bytes for every HMAC profile (sometimes any of 4..16), 16 for GCM */
  c.tag_len = pr.kind == 1 ? 16 : (rnd_below(8) == 0 ? (uint8_t)(4 + rnd_below(13)) : 10);
  bool e;
  if (pr.kind == 1)
    e = rnd_below(6) != 0; /* GCM: E set, sometimes clear (authentication only) */
  else if (pr.enc_len)
    e = rnd_below(8) != 0; /* AES-CM: E set, sometimes clear (no encryption) */
  else
    e = c.scen != PROTECT && rnd_below(8) == 0; /* NULL: E clear; a received E only authenticates */
  c.roc = (e ? 0x80000000u : 0u) | pick_index();
  c.ssrc = rnd_below(10) == 0 ? (rnd_below(2) ? 0u : 0xffffffffu) : rnd32();

  size_t len;
  switch (rnd_below(6)) {
    case 0: len = 8 + 4 * rnd_below(8); break;                           /* tiny, incl. no body */
    case 1: len = 8; break;                                              /* header only */
    case 2: len = 64 * (1 + rnd_below(23)) - 16 + rnd_below(16); break; /* SHA-1 padding boundaries */
    case 3: len = 8 + rnd_below(1493); break;                            /* any length: unaligned tag/trailer */
    default: len = 8 + 4 * rnd_below(374); break;                        /* whole words up to 1500 */
  }
  if (len < 8) len = 8;
  if (len > 1500) len = 1500;
  c.rtp_len = len;
  if (len % 4) ++g_rtcp_unaligned;
  if (len == 8) ++g_rtcp_empty;

  /* compound RTCP: a chain of V=2 headers with consistent length fields
     (an SR or RR first), random contents, the sender SSRC at bytes 4..8 */
  c.rtp.resize(len);
  rnd_fill(c.rtp.data(), len);
  for (size_t pos = 0; pos + 4 <= len;) {
    size_t plen = 4 * (2 + rnd_below(24));
    if (pos + plen > len || rnd_below(4) == 0) plen = (len - pos) & ~(size_t)3;
    c.rtp[pos] = (uint8_t)(0x80 | rnd_below(32));
    c.rtp[pos + 1] = (uint8_t)(pos == 0 ? 200 + rnd_below(2) : 200 + rnd_below(5));
    put_be16(&c.rtp[pos + 2], (uint16_t)(plen / 4 - 1));
    pos += plen;
  }
  put_be32(&c.rtp[4], c.ssrc);
  c.srtp = ref_srtcp_protect(k.raw, c.tag_len, c.rtp.data(), len, c.ssrc, c.roc);
  c.wrong = pr.kind == 1 ? (int)rnd_below(2) : 0;
  c.expect_st = (c.scen == PROTECT || c.scen == UNPROTECT) ? 1 : (c.scen == WRONG_CTX && c.wrong == 0 ? 3 : 2);
  g_rcount[c.prof][e][c.scen]++;
}

static Case make_case(const std::vector<KeyEntry>& keys) {
  Case c;
  const KeyEntry& k = keys[rnd_below((uint32_t)keys.size())];
  const Profile& pr = kProfiles[k.prof];
  c.prof = k.prof;
  c.slot = k.slot;
  c.tag_len = pr.tag_len;
  c.scen = (int)rnd_below(NSCEN);
  c.rtcp = false;
  c.wrong = 0;
  if (rnd_below(3) == 0) {
    make_rtcp_case(c, k);
    return c;
  }
  c.ssrc = rnd_below(10) == 0 ? (rnd_below(2) ? 0u : 0xffffffffu) : rnd32();
  c.roc = pick_roc();
  c.seq = rnd_below(10) == 0 ? (uint16_t)(rnd_below(2) ? 0 : 0xffff) : (uint16_t)rnd32();

  /* header: RTP-shaped (12 + 4*CC + optional extension) or, 10% of the time,
     any length (exercises the unaligned fallback) */
  bool rtp_shaped = rnd_below(10) != 0;
  size_t hdr;
  uint32_t cc = 0, ext_words = 0;
  bool ext = false;
  if (rtp_shaped) {
    cc = rnd_below(3) == 0 ? rnd_below(16) : 0;
    ext = rnd_below(3) == 0;
    ext_words = ext ? rnd_below(12) : 0;
    hdr = 12 + 4 * cc + (ext ? 4 + 4 * ext_words : 0);
  } else {
    hdr = rnd_below(120);
  }
  /* total RTP length in [max(12,hdr), 1500], biased to interesting values */
  size_t lo = hdr > 12 ? hdr : 12, len;
  switch (rnd_below(6)) {
    case 0: len = lo + rnd_below(40); break;                         /* tiny payloads, incl. 0 */
    case 1: len = lo; break;                                         /* zero payload (if hdr >= 12) */
    case 2: len = 64 * (1 + rnd_below(23)) - 16 + rnd_below(16); break; /* SHA-1 padding boundaries */
    case 3: len = 172; break;                                        /* the benchmark size */
    default: len = lo + rnd_below((uint32_t)(1501 - lo)); break;
  }
  if (len < lo) len = lo;
  if (len > 1500) len = 1500;
  c.hdr = hdr;
  c.rtp_len = len;
  if (hdr % 4) ++g_misaligned;
  if (len == hdr) ++g_zero_payload;

  c.rtp.resize(len);
  rnd_fill(c.rtp.data(), len);
  if (rtp_shaped) {
    c.rtp[0] = (uint8_t)(0x80 | (ext ? 0x10 : 0) | cc);
    c.rtp[1] = (uint8_t)(rnd32() & 0x7f);
    put_be16(&c.rtp[2], c.seq);
    put_be32(&c.rtp[8], c.ssrc);
    if (ext) {
      size_t e = 12 + 4 * cc;
      c.rtp[e] = 0xbe, c.rtp[e + 1] = 0xde;
      put_be16(&c.rtp[e + 2], (uint16_t)ext_words);
    }
  }
  c.srtp = ref_protect(k.raw, c.tag_len, c.rtp.data(), len, hdr, c.ssrc, c.roc, c.seq);
  c.expect_st = (c.scen == PROTECT || c.scen == UNPROTECT) ? 1 : 2;
  g_count[c.prof][c.scen]++;
  return c;
}

/* Builds the input buffer/descriptors for a batch and the expected buffer. */
struct Batch {
  Bytes data, expect;
  std::vector<PacketDesc> descs;
  std::vector<uint8_t> expect_st;
  std::vector<Case> cases;
};

static Batch build_batch(const std::vector<KeyEntry>& keys, int ncases) {
  Batch b;
  for (int i = 0; i < ncases; ++i) b.cases.push_back(make_case(keys));
  size_t total = 16;
  std::vector<size_t> offs;
  for (auto& c : b.cases) {
    offs.push_back(total);
    total += align16(c.srtp.size() + 16) + 16 * rnd_below(3); /* room + random gap */
  }
  b.data.resize(total + 16);
  rnd_fill(b.data.data(), b.data.size());
  for (size_t i = 0; i < b.cases.size(); ++i) {
    Case& c = b.cases[i];
    uint8_t* p = b.data.data() + offs[i];
    PacketDesc d;
    rnd_fill((uint8_t*)&d, sizeof d); /* pad fields hold garbage: must be ignored */
    d.offset = (uint32_t)offs[i];
    d.slot = c.slot;
    d.hdr = (uint16_t)c.hdr;
    d.tag_len = c.tag_len;
    d.ssrc = c.ssrc;
    d.roc = c.roc;
    d.seq = c.seq;
    d.status = 0;
    if (c.rtcp) {
      d.op = c.scen == PROTECT ? 2 : 3;
      if (c.scen == PROTECT) {
        d.len = (uint16_t)c.rtp_len;
        std::memcpy(p, c.rtp.data(), c.rtp_len);
      } else {
        d.len = (uint16_t)c.srtp.size();
        std::memcpy(p, c.srtp.data(), c.srtp.size());
        const bool gcm = kProfiles[c.prof].kind == 1;
        const size_t L = c.rtp_len, tr_at = gcm ? L + 16 : L, tag_at = gcm ? L : L + 4;
        if (c.scen == TAMPER) {
          /* flip one bit in the header, the body, the trailer or the tag... */
          size_t pos;
          for (;;) {
            uint32_t where = rnd_below(4);
            if (where == 0) { pos = rnd_below(8); break; }
            if (where == 1 && L > 8) { pos = 8 + rnd_below((uint32_t)(L - 8)); break; }
            if (where == 2) { pos = tr_at + rnd_below(4); break; }
            if (where == 3) { pos = tag_at + rnd_below(c.tag_len); break; }
          }
          p[pos] ^= (uint8_t)(1u << rnd_below(8));
          /* ...and fill the descriptor from the packet as the host does */
          d.ssrc = ((uint32_t)p[4] << 24) | ((uint32_t)p[5] << 16) | ((uint32_t)p[6] << 8) | p[7];
          d.roc = ((uint32_t)p[tr_at] << 24) | ((uint32_t)p[tr_at + 1] << 16) | ((uint32_t)p[tr_at + 2] << 8) | p[tr_at + 3];
        } else if (c.scen == WRONG_CTX) {
          if (c.wrong == 0) d.roc ^= 1u << rnd_below(32); /* not the packet's trailer: status 3 */
          else d.ssrc ^= 1u << rnd_below(32);             /* GCM: the SSRC is in the IV: status 2 */
        }
      }
    } else if (c.scen == PROTECT) {
      d.op = 0;
      d.len = (uint16_t)c.rtp_len;
      std::memcpy(p, c.rtp.data(), c.rtp_len);
    } else {
      d.op = 1;
      d.len = (uint16_t)c.srtp.size();
      std::memcpy(p, c.srtp.data(), c.srtp.size());
      if (c.scen == TAMPER) {
        /* flip one bit in the header, the payload or the tag */
        size_t pos;
        for (;;) {
          uint32_t where = rnd_below(3);
          if (where == 0 && c.hdr > 0) { pos = rnd_below((uint32_t)c.hdr); break; }
          if (where == 1 && c.rtp_len > c.hdr) { pos = c.hdr + rnd_below((uint32_t)(c.rtp_len - c.hdr)); break; }
          if (where == 2) { pos = c.rtp_len + rnd_below(c.tag_len); break; }
        }
        p[pos] ^= (uint8_t)(1u << rnd_below(8));
      } else if (c.scen == WRONG_CTX) {
        /* authenticated context: the ROC always; for GCM also SSRC and SEQ */
        uint32_t which = kProfiles[c.prof].kind == 1 ? rnd_below(3) : 0;
        if (which == 0) d.roc ^= 1u << rnd_below(32);
        if (which == 1) d.ssrc ^= 1u << rnd_below(32);
        if (which == 2) d.seq ^= (uint16_t)(1u << rnd_below(16));
      }
    }
    b.descs.push_back(d);
    b.expect_st.push_back(c.expect_st);
  }
  b.expect = b.data;
  for (size_t i = 0; i < b.cases.size(); ++i) {
    Case& c = b.cases[i];
    uint8_t* e = b.expect.data() + offs[i];
    if (c.scen == PROTECT) std::memcpy(e, c.srtp.data(), c.srtp.size());
    if (c.scen == UNPROTECT) std::memcpy(e + c.hdr, c.rtp.data() + c.hdr, c.rtp_len - c.hdr); /* tag bytes stay */
  }
  return b;
}

/* Compare a launch's result with the expectation; report the first few
 * mismatching packets. Returns true when identical. */
static bool verify(const Batch& b, const Bytes& data, const std::vector<PacketDesc>& descs, const char* what) {
  bool ok = true;
  int reported = 0;
  for (size_t i = 0; i < b.cases.size(); ++i) {
    const Case& c = b.cases[i];
    const PacketDesc& d = descs[i];
    size_t off = d.offset, room = align16(c.srtp.size() + 16);
    bool same = std::memcmp(data.data() + off, b.expect.data() + off, room) == 0;
    bool st_ok = d.status == b.expect_st[i];
    if (!same || !st_ok) {
      ok = false;
      if (reported++ < 5 && g_failures < 30) {
        size_t k = 0;
        while (k < room && data[off + k] == b.expect[off + k]) ++k;
        std::printf("  [%s] case %zu %s%s %s len %zu hdr %zu tag %u roc %08x: status %u (want %u), first diff at byte %zu\n",
                    what, i, c.rtcp ? "SRTCP " : "", kProfiles[c.prof].name, kScenarioName[c.scen], c.rtp_len, c.hdr, c.tag_len,
                    c.roc, d.status, b.expect_st[i], same ? (size_t)-1 : k);
      }
    }
  }
  bool whole = data == b.expect;
  CHECK(ok && whole, "%s: batch mismatch (whole buffer %s)", what, whole ? "equal" : "differs");
  return ok && whole;
}

/* The kernel's own protect output must unprotect back to the original. */
static void roundtrip(const Batch& b, const Bytes& data_after) {
  Bytes data = data_after;
  std::vector<PacketDesc> descs;
  std::vector<size_t> idx;
  for (size_t i = 0; i < b.cases.size(); ++i)
    if (b.cases[i].scen == PROTECT) {
      PacketDesc d = b.descs[i];
      d.op = b.cases[i].rtcp ? 3 : 1;
      d.len = (uint16_t)(d.len + d.tag_len + (b.cases[i].rtcp ? 4 : 0));
      d.status = 0;
      descs.push_back(d);
      idx.push_back(i);
    }
  srtp_host_packets(g_tables.data(), g_slots.data(), descs.data(), (uint32_t)descs.size(), data.data());
  bool ok = true;
  for (size_t j = 0; j < idx.size(); ++j) {
    const Case& c = b.cases[idx[j]];
    ok &= descs[j].status == 1 && std::memcmp(data.data() + descs[j].offset, c.rtp.data(), c.rtp_len) == 0;
  }
  CHECK(ok, "round trip of the kernel's protect output");
}

static std::vector<KeyEntry> make_keys(int n) {
  std::vector<KeyEntry> keys(n);
  std::vector<uint32_t> pool(kSlots);
  for (uint32_t i = 0; i < kSlots; ++i) pool[i] = i;
  for (uint32_t i = kSlots - 1; i > 0; --i) std::swap(pool[i], pool[rnd_below(i + 1)]);
  std::vector<RawKeys> raw;
  std::vector<uint32_t> ids;
  for (int i = 0; i < n; ++i) {
    KeyEntry& k = keys[i];
    k.prof = i < kNumProfiles ? i : (int)rnd_below(kNumProfiles);
    rnd_fill((uint8_t*)&k.raw, sizeof k.raw); /* unused bytes and pad: garbage */
    k.raw.enc_len = kProfiles[k.prof].enc_len;
    k.raw.kind = kProfiles[k.prof].kind;
    k.slot = pool[i];
    raw.push_back(k.raw);
    ids.push_back(k.slot);
  }
  setup_keys(raw, ids);
  return keys;
}

int main(int argc, char** argv) {
  int batches = argc > 1 ? std::atoi(argv[1]) : 40;
  g_rng = argc > 2 ? std::strtoull(argv[2], nullptr, 0) : 1;
  const int kCases = 1500; /* about 1000 SRTP and 500 SRTCP per launch */

  g_tables.assign(srtp_host_abi(0), 0);
  g_slots.assign((size_t)kSlots * srtp_host_abi(1), 0xAA);
  srtp_host_tables_init(g_tables.data());

  test_abi_and_tables();
  test_rfc3711_b2();
  test_hmac_kat();
  test_gcm_kat();
  test_srtcp_hmac_kat();
  test_srtcp_gcm_kat();
  test_rejections();
  std::printf("known-answer / ABI / rejection tests: %s\n", g_failures ? "FAILED" : "ok");

  for (int bi = 0; bi < batches; ++bi) {
    std::vector<KeyEntry> keys = make_keys(16);
    Batch b = build_batch(keys, kCases);
    Bytes data = b.data;
    std::vector<PacketDesc> descs = b.descs;
    srtp_host_packets(g_tables.data(), g_slots.data(), descs.data(), (uint32_t)descs.size(), data.data());
    if (verify(b, data, descs, "srtp_host_packets")) roundtrip(b, data);

    if (bi < 4) {
      /* other launch shapes: any block size >= 32, grid-stride loops */
      static const uint32_t shapes[][2] = {{1, 32}, {3, 64}, {2, 96}, {7, 256}};
      Bytes d2 = b.data;
      std::vector<PacketDesc> ds2 = b.descs;
      srtp_host_packets_launch(shapes[bi][0], shapes[bi][1], g_tables.data(), g_slots.data(), ds2.data(),
                               (uint32_t)ds2.size(), d2.data());
      verify(b, d2, ds2, "launch shape");
    }
    if (bi == 0) {
      /* concurrent host threads: thread_local "shared" memory must not race */
      std::atomic<int> bad{0};
      std::vector<std::thread> th;
      for (int t = 0; t < 4; ++t)
        th.emplace_back([&] {
          for (int rep = 0; rep < 3; ++rep) {
            Bytes d3 = b.data;
            std::vector<PacketDesc> ds3 = b.descs;
            srtp_host_packets(g_tables.data(), g_slots.data(), ds3.data(), (uint32_t)ds3.size(), d3.data());
            if (d3 != b.expect) bad++;
            for (size_t i = 0; i < ds3.size(); ++i)
              if (ds3[i].status != b.expect_st[i]) bad++;
          }
        });
      for (auto& t : th) t.join();
      CHECK(bad == 0, "concurrent host threads: %d mismatches", bad.load());
    }
  }

  std::printf("random cases per profile (protect / unprotect / tamper / wrong ctx):\n");
  long total = 0;
  for (int p = 0; p < kNumProfiles; ++p) {
    std::printf("  %-24s %6ld %6ld %6ld %6ld\n", kProfiles[p].name, g_count[p][0], g_count[p][1], g_count[p][2], g_count[p][3]);
    for (int s = 0; s < NSCEN; ++s) total += g_count[p][s];
  }
  std::printf("  total %ld cases (%ld with a header length not a multiple of 4, %ld zero-length payloads)\n", total,
              g_misaligned, g_zero_payload);
  std::printf("random SRTCP cases per key profile and E flag (protect / unprotect / tamper / wrong ctx):\n");
  long rtotal = 0;
  for (int p = 0; p < kNumProfiles; ++p)
    for (int e = 1; e >= 0; --e) {
      long n = 0;
      for (int s = 0; s < NSCEN; ++s) n += g_rcount[p][e][s];
      if (n == 0) continue;
      std::printf("  %-24s E=%d %6ld %6ld %6ld %6ld\n", kProfiles[p].name, e, g_rcount[p][e][0], g_rcount[p][e][1],
                  g_rcount[p][e][2], g_rcount[p][e][3]);
      rtotal += n;
    }
  std::printf("  total %ld SRTCP cases (%ld with a length not a multiple of 4, %ld with an empty body)\n", rtotal,
              g_rtcp_unaligned, g_rtcp_empty);
  std::printf("%d checks, %d failures\n", g_checks, g_failures);
  std::printf(g_failures ? "FAILED\n" : "PASSED\n");
  return g_failures ? 1 : 0;
}
