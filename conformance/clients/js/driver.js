// kspec's kafkajs driver: reads one JSON job on stdin, runs it with kafkajs, writes JSON lines on stdout.
//
// Jobs:
//   {"op": "produce", "brokers": [...], "topic": "t", "compression": "none|gzip|snappy|lz4|zstd",
//    "acks": -1, "idempotent": false, "batch": 1000,
//    "messages": [{"partition": 0, "key": "k", "value": "v", "headers": {"h": "x"}}]}
//     -> one line per message: {"partition": p, "offset": o}
//   {"op": "consume", "brokers": [...], "topic": "t", "group": "g", "count": N, "timeoutMs": 60000}
//     -> one line per message: {"partition", "offset", "key", "value", "headers", "timestamp"}
// Either job may carry "connection": {"ssl": {"ca": path, "cert": path, "key": path},
// "sasl": {"mechanism": "plain|scram-sha-256|scram-sha-512", "username", "password"}}.
// kafkajs ships gzip only; snappy, lz4 and zstd are registered below from small pure-JS packages.
'use strict'

const fs = require('fs')
const { Kafka, CompressionTypes, CompressionCodecs, logLevel } = require('kafkajs')
const SnappyCodec = require('kafkajs-snappy')
const lz4 = require('lz4js')
const zstdWasm = require('@bokuweb/zstd-wasm')
const fzstd = require('fzstd')

CompressionCodecs[CompressionTypes.Snappy] = SnappyCodec
CompressionCodecs[CompressionTypes.LZ4] = () => ({
  compress: async (encoder) => Buffer.from(lz4.compress(encoder.buffer)),
  decompress: async (buffer) => Buffer.from(lz4.decompress(buffer)),
})
let zstdReady = null // the wasm module is instantiated once; re-instantiating it mid-run corrupts output
CompressionCodecs[CompressionTypes.ZSTD] = () => ({
  compress: async (encoder) => {
    zstdReady = zstdReady || zstdWasm.init()
    await zstdReady
    return Buffer.from(zstdWasm.compress(encoder.buffer, 3))
  },
  decompress: async (buffer) => Buffer.from(fzstd.decompress(buffer)),
})

const COMPRESSION = {
  none: CompressionTypes.None, gzip: CompressionTypes.GZIP, snappy: CompressionTypes.Snappy,
  lz4: CompressionTypes.LZ4, zstd: CompressionTypes.ZSTD,
}

function emit(obj) { process.stdout.write(JSON.stringify(obj) + '\n') }

async function produce(kafka, job) {
  const producer = kafka.producer({ idempotent: !!job.idempotent, maxInFlightRequests: job.idempotent ? 1 : 5 })
  await producer.connect()
  const batchSize = job.batch || 1000
  for (let start = 0; start < job.messages.length; start += batchSize) {
    const slice = job.messages.slice(start, start + batchSize)
    const results = await producer.send({
      topic: job.topic, acks: job.acks === undefined ? -1 : job.acks,
      compression: COMPRESSION[job.compression || 'none'],
      messages: slice.map((m) => ({ partition: m.partition, key: m.key, value: m.value, headers: m.headers || {} })),
    })
    // kafkajs returns one base offset per partition; messages of one partition are contiguous in send order.
    const next = new Map(results.map((r) => [r.partition, BigInt(r.baseOffset)]))
    for (const m of slice) {
      const offset = next.get(m.partition)
      next.set(m.partition, offset + 1n)
      emit({ partition: m.partition, offset: Number(offset) })
    }
  }
  await producer.disconnect()
}

async function consume(kafka, job) {
  const consumer = kafka.consumer({ groupId: job.group })
  await consumer.connect()
  await consumer.subscribe({ topic: job.topic, fromBeginning: true })
  let seen = 0
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`timed out after ${seen} of ${job.count} messages`)),
      job.timeoutMs || 60000)
    consumer.run({
      eachMessage: async ({ partition, message }) => {
        const headers = {}
        for (const [k, v] of Object.entries(message.headers || {})) headers[k] = v ? v.toString() : null
        emit({
          partition, offset: Number(message.offset), timestamp: Number(message.timestamp),
          key: message.key ? message.key.toString() : null, value: message.value ? message.value.toString() : null,
          headers,
        })
        seen += 1
        if (seen >= job.count) { clearTimeout(timer); resolve() }
      },
    }).catch(reject)
  })
  await consumer.disconnect()
}

// kafkajs's ssl option takes PEM contents, not file names.
function connectionOptions (connection) {
  const options = {}
  if (connection.ssl) {
    options.ssl = {}
    for (const key of ['ca', 'cert', 'key']) {
      if (connection.ssl[key]) options.ssl[key] = fs.readFileSync(connection.ssl[key], 'utf-8')
    }
  }
  if (connection.sasl) options.sasl = connection.sasl
  return options
}

async function main() {
  const chunks = []
  for await (const chunk of process.stdin) chunks.push(chunk)
  const job = JSON.parse(Buffer.concat(chunks).toString())
  const kafka = new Kafka({ clientId: 'kspec-kafkajs', brokers: job.brokers, logLevel: logLevel.ERROR,
    ...connectionOptions(job.connection || {}) })
  if (job.op === 'produce') await produce(kafka, job)
  else if (job.op === 'consume') await consume(kafka, job)
  else throw new Error(`unknown op ${job.op}`)
}

main().catch((err) => { process.stderr.write(`kafkajs driver: ${err.stack || err}\n`); process.exit(1) })
