//! RMCP+ cryptography for cipher suites 3 and 17 (IPMI v2.0 §13.28–13.32): the RAKP key
//! exchange codes, the session keys derived from them, packet integrity and AES-CBC-128
//! confidentiality. RustCrypto primitives; nothing here does I/O.

use std::fmt;

use aes::Aes128;
use cbc::cipher::{BlockModeDecrypt, BlockModeEncrypt, KeyIvInit};
use hmac::{Hmac, KeyInit, Mac};
use sha1::Sha1;
use sha2::Sha256;

use zeroize::Zeroize;

use super::WireError;

/// The cipher suites baremend speaks. Both use AES-CBC-128 for confidentiality.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CipherSuite {
    /// RAKP-HMAC-SHA1, HMAC-SHA1-96, AES-CBC-128.
    Suite3,
    /// RAKP-HMAC-SHA256, HMAC-SHA256-128, AES-CBC-128 (the only suite many current BMCs allow).
    Suite17,
}

/// Authentication algorithm numbers (IPMI v2.0 table 13-17).
const RAKP_HMAC_SHA1: u8 = 0x01;
const RAKP_HMAC_SHA256: u8 = 0x03;
/// Integrity algorithm numbers (table 13-18).
const HMAC_SHA1_96: u8 = 0x01;
const HMAC_SHA256_128: u8 = 0x04;
/// Confidentiality algorithm number (table 13-19).
const AES_CBC_128: u8 = 0x01;

/// The AES block size, also the IV length.
pub const AES_BLOCK: usize = 16;
/// The key length of K_UID and K_G: passwords are zero-padded to 20 bytes.
pub const USER_KEY_LEN: usize = 20;

impl CipherSuite {
    /// Every suite, strongest first.
    pub const ALL: [CipherSuite; 2] = [CipherSuite::Suite17, CipherSuite::Suite3];

    /// The cipher suite id.
    pub fn id(self) -> u8 {
        match self {
            CipherSuite::Suite3 => 3,
            CipherSuite::Suite17 => 17,
        }
    }

    /// The suite with this id, if supported.
    pub fn from_id(id: u8) -> Option<Self> {
        match id {
            3 => Some(CipherSuite::Suite3),
            17 => Some(CipherSuite::Suite17),
            _ => None,
        }
    }

    /// The suite made of these algorithm numbers, if supported.
    pub fn from_algorithms(auth: u8, integrity: u8, confidentiality: u8) -> Option<Self> {
        CipherSuite::ALL
            .into_iter()
            .find(|s| s.algorithms() == (auth, integrity, confidentiality))
    }

    /// (authentication, integrity, confidentiality) algorithm numbers.
    pub fn algorithms(self) -> (u8, u8, u8) {
        match self {
            CipherSuite::Suite3 => (RAKP_HMAC_SHA1, HMAC_SHA1_96, AES_CBC_128),
            CipherSuite::Suite17 => (RAKP_HMAC_SHA256, HMAC_SHA256_128, AES_CBC_128),
        }
    }

    fn hash(self) -> HashKind {
        match self {
            CipherSuite::Suite3 => HashKind::Sha1,
            CipherSuite::Suite17 => HashKind::Sha256,
        }
    }

    /// Length of the RAKP 2 and RAKP 3 key exchange authentication codes.
    pub fn auth_code_len(self) -> usize {
        self.hash().output_len()
    }

    /// Length of a packet's integrity AuthCode and of the RAKP 4 integrity check value.
    pub fn integrity_len(self) -> usize {
        match self {
            CipherSuite::Suite3 => 12,
            CipherSuite::Suite17 => 16,
        }
    }
}

#[derive(Clone, Copy)]
enum HashKind {
    Sha1,
    Sha256,
}

impl HashKind {
    fn output_len(self) -> usize {
        match self {
            HashKind::Sha1 => 20,
            HashKind::Sha256 => 32,
        }
    }

    fn mac(self, key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
        // HMAC accepts keys of any length, so building it cannot fail.
        fn run<M: Mac + KeyInit>(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
            let mut mac = match <M as KeyInit>::new_from_slice(key) {
                Ok(mac) => mac,
                Err(_) => return Vec::new(),
            };
            for part in parts {
                mac.update(part);
            }
            mac.finalize().into_bytes().to_vec()
        }
        match self {
            HashKind::Sha1 => run::<Hmac<Sha1>>(key, parts),
            HashKind::Sha256 => run::<Hmac<Sha256>>(key, parts),
        }
    }

    /// Constant-time comparison of `expected` with the (possibly truncated) MAC.
    fn verify(self, key: &[u8], parts: &[&[u8]], expected: &[u8]) -> bool {
        fn run<M: Mac + KeyInit>(key: &[u8], parts: &[&[u8]], expected: &[u8]) -> bool {
            let Ok(mut mac) = <M as KeyInit>::new_from_slice(key) else {
                return false;
            };
            for part in parts {
                mac.update(part);
            }
            !expected.is_empty() && mac.verify_truncated_left(expected).is_ok()
        }
        match self {
            HashKind::Sha1 => run::<Hmac<Sha1>>(key, parts, expected),
            HashKind::Sha256 => run::<Hmac<Sha256>>(key, parts, expected),
        }
    }
}

/// K_UID: the password zero-padded to 20 bytes. Longer passwords are not IPMI passwords.
pub fn user_key(password: &[u8]) -> Result<[u8; USER_KEY_LEN], WireError> {
    if password.len() > USER_KEY_LEN {
        return Err(WireError::Invalid("an IPMI password has at most 20 bytes"));
    }
    let mut key = [0u8; USER_KEY_LEN];
    key[..password.len()].copy_from_slice(password);
    Ok(key)
}

/// What both sides know once RAKP 2 is exchanged.
#[derive(Clone)]
pub struct RakpContext {
    /// The suite negotiated.
    pub suite: CipherSuite,
    /// SID_M: the remote console's session id.
    pub console_session_id: u32,
    /// SID_C: the managed system's (BMC's) session id.
    pub bmc_session_id: u32,
    /// R_M: the console's random number.
    pub console_random: [u8; 16],
    /// R_C: the BMC's random number.
    pub bmc_random: [u8; 16],
    /// GUID_C: the BMC's GUID.
    pub bmc_guid: [u8; 16],
    /// ROLE_M: the whole requested-role byte of RAKP 1 (privilege and lookup bit).
    pub role: u8,
    /// The user name as sent in RAKP 1.
    pub username: Vec<u8>,
}

impl fmt::Debug for RakpContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RakpContext")
            .field("suite", &self.suite)
            .field("console_session_id", &self.console_session_id)
            .field("bmc_session_id", &self.bmc_session_id)
            .field("role", &self.role)
            .finish_non_exhaustive()
    }
}

impl RakpContext {
    fn username_len(&self) -> [u8; 1] {
        // RAKP 1 carries at most 16 bytes of user name.
        [self.username.len().min(16) as u8]
    }

    fn rakp2_parts(&self) -> [Vec<u8>; 8] {
        [
            self.console_session_id.to_le_bytes().to_vec(),
            self.bmc_session_id.to_le_bytes().to_vec(),
            self.console_random.to_vec(),
            self.bmc_random.to_vec(),
            self.bmc_guid.to_vec(),
            vec![self.role],
            self.username_len().to_vec(),
            self.username.clone(),
        ]
    }

    fn rakp3_parts(&self) -> [Vec<u8>; 5] {
        [
            self.bmc_random.to_vec(),
            self.console_session_id.to_le_bytes().to_vec(),
            vec![self.role],
            self.username_len().to_vec(),
            self.username.clone(),
        ]
    }

    /// The BMC's RAKP 2 key exchange authentication code, keyed with K_UID.
    pub fn rakp2_auth_code(&self, user_key: &[u8]) -> Vec<u8> {
        let parts = self.rakp2_parts();
        self.suite.hash().mac(user_key, &refs(&parts))
    }

    /// Whether a received RAKP 2 code proves the BMC knows the same password.
    pub fn verify_rakp2(&self, user_key: &[u8], code: &[u8]) -> bool {
        let parts = self.rakp2_parts();
        code.len() == self.suite.auth_code_len()
            && self.suite.hash().verify(user_key, &refs(&parts), code)
    }

    /// The console's RAKP 3 key exchange authentication code, keyed with K_UID.
    pub fn rakp3_auth_code(&self, user_key: &[u8]) -> Vec<u8> {
        let parts = self.rakp3_parts();
        self.suite.hash().mac(user_key, &refs(&parts))
    }

    /// Whether a received RAKP 3 code proves the console knows the password.
    pub fn verify_rakp3(&self, user_key: &[u8], code: &[u8]) -> bool {
        let parts = self.rakp3_parts();
        code.len() == self.suite.auth_code_len()
            && self.suite.hash().verify(user_key, &refs(&parts), code)
    }

    /// SIK, keyed with K_G (here always K_UID: no two-key logins).
    pub fn session_integrity_key(&self, key: &[u8]) -> Vec<u8> {
        self.suite.hash().mac(
            key,
            &[
                &self.console_random,
                &self.bmc_random,
                &[self.role],
                &self.username_len(),
                &self.username,
            ],
        )
    }

    fn rakp4_parts(&self) -> [Vec<u8>; 3] {
        [
            self.console_random.to_vec(),
            self.bmc_session_id.to_le_bytes().to_vec(),
            self.bmc_guid.to_vec(),
        ]
    }

    /// The BMC's RAKP 4 integrity check value, keyed with SIK.
    pub fn rakp4_icv(&self, sik: &[u8]) -> Vec<u8> {
        let parts = self.rakp4_parts();
        let mut icv = self.suite.hash().mac(sik, &refs(&parts));
        icv.truncate(self.suite.integrity_len());
        icv
    }

    /// Whether a received RAKP 4 value is right.
    pub fn verify_rakp4(&self, sik: &[u8], icv: &[u8]) -> bool {
        let parts = self.rakp4_parts();
        icv.len() == self.suite.integrity_len() && self.suite.hash().verify(sik, &refs(&parts), icv)
    }
}

fn refs<const N: usize>(parts: &[Vec<u8>; N]) -> [&[u8]; N] {
    std::array::from_fn(|i| parts[i].as_slice())
}

/// The keys of an active session: K1 for integrity, the first 16 bytes of K2 for AES.
#[derive(Clone)]
pub struct SessionCrypto {
    suite: CipherSuite,
    k1: Vec<u8>,
    aes_key: [u8; 16],
}

impl fmt::Debug for SessionCrypto {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionCrypto")
            .field("suite", &self.suite)
            .finish_non_exhaustive()
    }
}

/// The keys are wiped when the session (and every copy of its keys) is dropped.
impl Drop for SessionCrypto {
    fn drop(&mut self) {
        self.k1.zeroize();
        self.aes_key.zeroize();
    }
}

impl SessionCrypto {
    /// Derives K1 = HMAC_SIK(20 × 0x01) and K2 = HMAC_SIK(20 × 0x02).
    pub fn derive(suite: CipherSuite, sik: &[u8]) -> Self {
        let hash = suite.hash();
        let k1 = hash.mac(sik, &[&[0x01; 20]]);
        let k2 = hash.mac(sik, &[&[0x02; 20]]);
        let mut aes_key = [0u8; 16];
        aes_key.copy_from_slice(&k2[..16]);
        SessionCrypto { suite, k1, aes_key }
    }

    /// The negotiated suite.
    pub fn suite(&self) -> CipherSuite {
        self.suite
    }

    /// The AuthCode of the bytes from AuthType through Next Header.
    pub fn auth_code(&self, signed: &[u8]) -> Vec<u8> {
        let mut code = self.suite.hash().mac(&self.k1, &[signed]);
        code.truncate(self.suite.integrity_len());
        code
    }

    /// Constant-time check of a received AuthCode.
    pub fn verify_auth_code(&self, signed: &[u8], code: &[u8]) -> bool {
        code.len() == self.suite.integrity_len()
            && self.suite.hash().verify(&self.k1, &[signed], code)
    }

    /// IV, then the payload padded with 1, 2, 3… and a pad-length byte, encrypted.
    pub fn encrypt(&self, payload: &[u8], iv: [u8; AES_BLOCK]) -> Vec<u8> {
        let pad = (AES_BLOCK - (payload.len() + 1) % AES_BLOCK) % AES_BLOCK;
        let mut plain = Vec::with_capacity(payload.len() + pad + 1);
        plain.extend_from_slice(payload);
        plain.extend((1..=pad).map(|n| n as u8));
        plain.push(pad as u8);
        let mut encryptor = cbc::Encryptor::<Aes128>::new(&self.aes_key.into(), &iv.into());
        for chunk in plain.chunks_exact_mut(AES_BLOCK) {
            if let Ok(block) = <&mut cbc::cipher::Block<Aes128>>::try_from(chunk) {
                encryptor.encrypt_block(block);
            }
        }
        let mut out = Vec::with_capacity(AES_BLOCK + plain.len());
        out.extend_from_slice(&iv);
        out.extend_from_slice(&plain);
        out
    }

    /// Reverses [`SessionCrypto::encrypt`], checking the padding.
    pub fn decrypt(&self, data: &[u8]) -> Result<Vec<u8>, WireError> {
        if data.len() < 2 * AES_BLOCK || !data.len().is_multiple_of(AES_BLOCK) {
            return Err(WireError::Decrypt(
                "the encrypted payload is not an IV and whole AES blocks",
            ));
        }
        let (iv, cipher_text) = data.split_at(AES_BLOCK);
        let mut iv_block = [0u8; AES_BLOCK];
        iv_block.copy_from_slice(iv);
        let mut decryptor = cbc::Decryptor::<Aes128>::new(&self.aes_key.into(), &iv_block.into());
        let mut plain = cipher_text.to_vec();
        for chunk in plain.chunks_exact_mut(AES_BLOCK) {
            if let Ok(block) = <&mut cbc::cipher::Block<Aes128>>::try_from(chunk) {
                decryptor.decrypt_block(block);
            }
        }
        let pad = usize::from(*plain.last().unwrap_or(&0));
        if pad >= AES_BLOCK || pad + 1 > plain.len() {
            return Err(WireError::Decrypt(
                "the confidentiality pad length is impossible",
            ));
        }
        let payload_len = plain.len() - pad - 1;
        let padding_ok = plain[payload_len..payload_len + pad]
            .iter()
            .enumerate()
            .all(|(i, b)| usize::from(*b) == i + 1);
        if !padding_ok {
            return Err(WireError::Decrypt("the confidentiality pad is malformed"));
        }
        plain.truncate(payload_len);
        Ok(plain)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn context(suite: CipherSuite) -> RakpContext {
        RakpContext {
            suite,
            console_session_id: 0x1122_3344,
            bmc_session_id: 0x5566_7788,
            console_random: [7; 16],
            bmc_random: [9; 16],
            bmc_guid: [0xA1; 16],
            role: 0x14,
            username: b"admin".to_vec(),
        }
    }

    #[test]
    fn key_exchange_codes_verify_only_with_the_same_password() {
        for suite in CipherSuite::ALL {
            let ctx = context(suite);
            let right = user_key(b"password").unwrap();
            let wrong = user_key(b"passw0rd").unwrap();
            let code = ctx.rakp2_auth_code(&right);
            assert_eq!(code.len(), suite.auth_code_len());
            assert!(ctx.verify_rakp2(&right, &code));
            assert!(!ctx.verify_rakp2(&wrong, &code));
            let code3 = ctx.rakp3_auth_code(&right);
            assert!(ctx.verify_rakp3(&right, &code3));
            assert!(!ctx.verify_rakp3(&right, &code));
            let sik = ctx.session_integrity_key(&right);
            let icv = ctx.rakp4_icv(&sik);
            assert_eq!(icv.len(), suite.integrity_len());
            assert!(ctx.verify_rakp4(&sik, &icv));
            assert!(!ctx.verify_rakp4(&ctx.session_integrity_key(&wrong), &icv));
        }
    }

    #[test]
    fn hmac_sha1_matches_the_rfc_2202_vector() {
        // RFC 2202 test case 2: key "Jefe", data "what do ya want for nothing?".
        let mac = HashKind::Sha1.mac(b"Jefe", &[b"what do ya want ", b"for nothing?"]);
        let hex: String = mac.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, "effcdf6ae5eb2fa2d27416d5f184df9c259a7c79");
    }

    #[test]
    fn hmac_sha256_matches_the_rfc_4231_vector() {
        let mac = HashKind::Sha256.mac(b"Jefe", &[b"what do ya want for nothing?"]);
        let hex: String = mac.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn aes_cbc_round_trips_every_length_and_rejects_bad_padding() {
        let crypto = SessionCrypto::derive(CipherSuite::Suite17, &[3; 32]);
        for len in 0..40 {
            let payload: Vec<u8> = (0..len).map(|n| n as u8).collect();
            let sealed = crypto.encrypt(&payload, [0x5A; 16]);
            assert_eq!(sealed.len() % AES_BLOCK, 0);
            assert_eq!(crypto.decrypt(&sealed).unwrap(), payload);
        }
        let mut sealed = crypto.encrypt(b"chassis", [1; 16]);
        let last = sealed.len() - 1;
        sealed[last] ^= 0x40;
        assert!(crypto.decrypt(&sealed).is_err());
        assert!(crypto.decrypt(&[0; 17]).is_err());
        assert!(crypto.decrypt(&[0; 16]).is_err());
    }

    #[test]
    fn aes_cbc_128_matches_openssl() {
        // Key and IV of NIST SP 800-38A F.2.1; the block is 15 payload bytes and the pad length
        // byte 0. Expected value from `openssl enc -aes-128-cbc -nopad`.
        let key = [
            0x2b, 0x7e, 0x15, 0x16, 0x28, 0xae, 0xd2, 0xa6, 0xab, 0xf7, 0x15, 0x88, 0x09, 0xcf,
            0x4f, 0x3c,
        ];
        let iv: [u8; 16] = std::array::from_fn(|i| i as u8);
        let crypto = SessionCrypto {
            suite: CipherSuite::Suite3,
            k1: Vec::new(),
            aes_key: key,
        };
        let payload = [
            0x6b, 0xc1, 0xbe, 0xe2, 0x2e, 0x40, 0x9f, 0x96, 0xe9, 0x3d, 0x7e, 0x11, 0x73, 0x93,
            0x17,
        ];
        let sealed = crypto.encrypt(&payload, iv);
        let hex: String = sealed[16..].iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, "5ffa18ddb3bcd4025ceb7e1d31df9a4c");
        assert_eq!(sealed[..16], iv);
    }

    #[test]
    fn passwords_longer_than_twenty_bytes_are_refused() {
        assert!(user_key(&[b'x'; 20]).is_ok());
        assert!(user_key(&[b'x'; 21]).is_err());
    }
}
