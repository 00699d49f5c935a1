import { receiptMiddleware, remoteKeys } from '@countersign/client/receipts';
const guard = receiptMiddleware({ tool: 'payments.send', keys: remoteKeys('https://countersign.example.com/.well-known/jwks.json') });
app.post('/payments.send', express.json(), guard, async (req, res) => {
  res.json(await sendPayment(req.body)); // only for a valid, unused receipt of exactly this body
});
