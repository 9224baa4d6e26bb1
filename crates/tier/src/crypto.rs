//! The S3 client's signing digests (SHA-256 and HMAC-SHA-256 for SigV4) from RustCrypto,
//! so that the client needs no C crypto library. Nothing here signs with keys: S3 asks
//! for no RSA signature.

use hmac::Mac;
use object_store::client::{
    CryptoProvider, DigestAlgorithm, DigestContext, HmacContext, Signer, SigningAlgorithm,
};
use sha2::Digest;

#[derive(Debug)]
pub(crate) struct RustCrypto;

struct Sha256Digest {
    hasher: sha2::Sha256,
    out: Vec<u8>,
}

impl DigestContext for Sha256Digest {
    fn update(&mut self, data: &[u8]) {
        self.hasher.update(data);
    }

    fn finish(&mut self) -> object_store::Result<&[u8]> {
        self.out = std::mem::take(&mut self.hasher).finalize().to_vec();
        Ok(&self.out)
    }
}

struct Sha256Hmac {
    mac: Option<hmac::Hmac<sha2::Sha256>>,
    out: Vec<u8>,
}

impl HmacContext for Sha256Hmac {
    fn update(&mut self, data: &[u8]) {
        if let Some(mac) = self.mac.as_mut() {
            mac.update(data);
        }
    }

    fn finish(&mut self) -> object_store::Result<&[u8]> {
        if let Some(mac) = self.mac.take() {
            self.out = mac.finalize().into_bytes().to_vec();
        }
        Ok(&self.out)
    }
}

fn unsupported(operation: &str) -> object_store::Error {
    object_store::Error::NotImplemented {
        operation: operation.into(),
        implementer: "headway-tier's RustCrypto provider".into(),
    }
}

impl CryptoProvider for RustCrypto {
    fn digest(&self, algorithm: DigestAlgorithm) -> object_store::Result<Box<dyn DigestContext>> {
        match algorithm {
            DigestAlgorithm::Sha256 => Ok(Box::new(Sha256Digest {
                hasher: sha2::Sha256::new(),
                out: Vec::new(),
            })),
            _ => Err(unsupported("a digest other than SHA-256")),
        }
    }

    fn hmac(
        &self,
        algorithm: DigestAlgorithm,
        secret: &[u8],
    ) -> object_store::Result<Box<dyn HmacContext>> {
        match algorithm {
            DigestAlgorithm::Sha256 => Ok(Box::new(Sha256Hmac {
                // HMAC takes a key of any length.
                mac: hmac::Hmac::new_from_slice(secret).ok(),
                out: Vec::new(),
            })),
            _ => Err(unsupported("an HMAC other than SHA-256")),
        }
    }

    fn sign(&self, _: SigningAlgorithm, _: &[u8]) -> object_store::Result<Box<dyn Signer>> {
        Err(unsupported("signing with a private key"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn digests_match_the_published_test_vectors() {
        // FIPS 180-2's "abc" and RFC 4231's test case 2.
        let mut d = RustCrypto.digest(DigestAlgorithm::Sha256).unwrap();
        d.update(b"abc");
        assert_eq!(
            hex(d.finish().unwrap()),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let mut h = RustCrypto.hmac(DigestAlgorithm::Sha256, b"Jefe").unwrap();
        h.update(b"what do ya want ");
        h.update(b"for nothing?");
        assert_eq!(
            hex(h.finish().unwrap()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}
